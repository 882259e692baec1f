"""The precision OpenVINO compiles a CPU program at while it is lowered into a ``.pte``.

ExecuTorch's OpenVINO backend compiles the graph with the plugin's defaults and stores the compiled
model (``export_model()``) in the program. What the CPU plugin stores is its graph *after* its own
transformations, and on a CPU with AMX (Sapphire Rapids and later Xeons) its default precision is
bf16, under which it fuses every gate/up/down MLP into an ``LLMMLP`` node. That node is then in the
program for good:

- it computes at bf16 whatever precision the program is imported with, so an f32 program is not f32
  on the machine that imports it;
- OpenVINO 2025.4.1 sets it up by splitting its work over half the inference threads: with one
  inference thread (how the daemon runs on a 2-core robot computer) that is a division by zero, and
  the importing process dies with SIGFPE (a SmolVLA program, on either engine).

Compiled at f32, the CPU plugin applies neither fusion, and the blob keeps the plain layers; the
precision it then runs at is decided where it is imported (the openvino engine's
``INFERENCE_PRECISION_HINT``, or the plugin's default under the executorch engine), as on every
other CPU. Programs for other devices are compiled as before.

Nor does the blob keep OpenVINO's snippets (its fused element-wise subgraphs): a subgraph is
lowered into code for the precision it was tokenized at, and OpenVINO 2025.4.1 cannot lower every
one at another (a tiny SmolVLA's blob compiled at f32, imported at bf16 as ExecuTorch's backend
imports it on a CPU with native bf16: "Supported precisions set is not available for Constant
operation", from ``snippets/src/lowered/target_machine.cpp``). Without them the blob imports at
whichever precision the importing CPU and engine ask for. The cost, measured on a Xeon with AMX, a
tiny SmolVLA, 2 threads: 1.45 against 1.39 ms at f32, 1.70 against 1.44 ms at bf16 (element-wise
layers run as separate nodes; the graph optimiser still fuses what it can into the layers before them).

INT8 programs are the exception (``snippets=True``): they are run at the importing CPU's default
precision, and snippets are also where the CPU plugin fuses attention (MatMul -> Softmax -> MatMul)
into one node. Measured on a two-camera 480x640 LeRobot ACT's INT8 program, one thread of a Xeon
with AMX, imported at the plugin's default (bf16), the two lowerings timed in turns: 88.7 ms without
snippets, 59.9 ms with them. Without them its six attention-times-value MatMuls ran at f32 (12.5
ms), the softmaxes (7.0 ms) and 37 element-wise layers (9.3 ms) as separate nodes, with 74 reorders
between them (16.6 ms; bf16 and f32). Whether snippets tokenized at f32 import at bf16 depends on
the graph (a tiny SmolVLA's INT8 program does not, with the error above), so an INT8 compile is
imported back at once at the plugin's default, as the engines import an INT8 program, and compiled
again without snippets when that fails.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

# what the lowering's CPU compile is told; a property the caller sets itself is kept
CPU_LOWERING_PROPERTIES: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": "DISABLE"}


def lowering_config(device_name: str | None, config: Any, *, snippets: bool = False) -> dict[str, Any]:
    """The properties a compile for ``device_name`` is given while lowering: a CPU's get
    :data:`CPU_LOWERING_PROPERTIES` (without the snippets switch when ``snippets``) under the caller's own."""
    if device_name != "CPU":
        return dict(config or {})
    ours = {k: v for k, v in CPU_LOWERING_PROPERTIES.items() if not (snippets and k == "SNIPPETS_MODE")}
    return {**ours, **(config or {})}


def import_failure(core: Any, compiled: Any) -> str | None:
    """Why ``compiled``'s exported blob does not import on the CPU with the plugin's defaults (as
    ExecuTorch's backend and the engines import an INT8 program), or None when it does."""
    try:
        core.import_model(compiled.export_model(), "CPU")
    except RuntimeError as e:
        return " ".join(str(e).split())
    return None


@contextlib.contextmanager
def cpu_lowering_precision(*, snippets: bool = False) -> Iterator[None]:
    """While the block runs, OpenVINO's PyTorch compile path compiles CPU programs at f32, without
    snippets unless ``snippets`` (INT8 programs)."""
    try:
        from openvino.frontend.pytorch.torchdynamo import compile as ov_compile
    except ImportError:  # no OpenVINO frontend: nothing is compiled here
        yield
        return

    original = ov_compile.Core

    class LoweringCore(original):  # type: ignore[misc,valid-type]
        def compile_model(self, model: Any, device_name: str | None = None, config: Any = None) -> Any:
            properties = lowering_config(device_name, config, snippets=snippets)
            compiled = super().compile_model(model, device_name, properties)
            if device_name != "CPU" or "SNIPPETS_MODE" in properties:
                return compiled
            reason = import_failure(self, compiled)
            if reason is None:
                return compiled
            log.warning(
                "the CPU program compiled with OpenVINO's snippets does not import at the plugin's default "
                "precision (%s); compiling it without them",
                reason,
            )
            return super().compile_model(model, device_name, {**properties, "SNIPPETS_MODE": "DISABLE"})

    ov_compile.Core = LoweringCore
    try:
        yield
    finally:
        ov_compile.Core = original
