"""Exporting a PyTorch policy into a bundle: tracing, lowering for a device, and proving the result.

``FUNC()`` returns ``(torch.nn.Module, dict[str, torch.Tensor])``: the model and named example inputs
in forward-argument order. The example inputs become the bundle's test case, with the eager PyTorch
outputs as the reference. Tracing (runtime.export.trace) may run in another Python, the stack that
built the policy; lowering and the proof (runtime.export.prove) run here, where ExecuTorch's OpenVINO
backend is. ``lower_bundle`` adds a program for another device from a bundle's portable ``.pt2``.
"""

from __future__ import annotations

import datetime as _dt
import io
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from runtime import __version__
from runtime.bundle.bundle import Bundle, sha256_bytes
from runtime.bundle.manifest import (
    DEFAULT_TOLERANCE,
    DEVICES,
    F32_CEILING,
    PRECISIONS,
    FileEntry,
    LanguageEntry,
    Manifest,
    ProgramEntry,
    RtcEntry,
    TestCaseEntry,
    ToleranceBasis,
)
from runtime.bundle.pte import parse_program
from runtime.engine.devices import present_devices
from runtime.errors import DeviceError, ExportError, MissingDependencyError
from runtime.export import prove
from runtime.export.lowering_checks import check_lowered, enforce
from runtime.export.trace import PORTABLE_FILE, TEST_CASE_FILE, Trace, _torch, step, trace_policy
from runtime.versions import package_version as _version

log = logging.getLogger(__name__)

__all__ = ["PORTABLE_FILE", "TEST_CASE_FILE", "build_bundle", "export_bundle", "lower_bundle", "lower_program"]


def tool_versions() -> dict[str, str]:
    return {
        "lerobot_runtime": __version__,
        "torch": _version("torch"),
        "executorch": _version("executorch"),
        "openvino": _version("openvino"),
        "nncf": _version("nncf"),
        "python": ".".join(map(str, sys.version_info[:3])),
    }


def check_device_present(device: str) -> None:
    if device not in DEVICES:
        raise DeviceError(f"--device: expected one of {', '.join(DEVICES)}, got {device!r}")
    present = present_devices()
    if device not in present:
        raise DeviceError(
            f"OpenVINO does not see a {device} on this machine (it sees: {', '.join(present) or 'none'}). "
            f"OpenVINO compiles only for devices that are present: lower the {device} program on the machine "
            f"that has it, with: lerobot-runtime lower BUNDLE --device {device}"
        )


def lower_program(
    exported: Any,
    device: str,
    *,
    input_names: tuple[str, ...] = (),
    output_names: tuple[str, ...] = (),
    snippets: bool = False,
) -> bytes:
    """torch ExportedProgram -> ``.pte`` bytes with the graph delegated to OpenVINO on ``device``.

    A CPU program is compiled at f32 without OpenVINO's snippets, or with them when ``snippets``
    (INT8 programs; :mod:`runtime.export.compile_precision`).

    Refuses (:class:`ExportError`) a program OpenVINO is known to run with wrong results and no error,
    and warns about one it may (:mod:`runtime.export.lowering_checks`); the messages use the
    program's input and output names when given.
    """
    try:
        from executorch.backends.openvino.partitioner import OpenvinoPartitioner
        from executorch.exir import to_edge_transform_and_lower
        from executorch.exir.backend.compile_spec_schema import CompileSpec
    except ImportError as e:
        raise MissingDependencyError(
            f"lowering needs executorch with its OpenVINO backend and nncf ({e}): pip install 'lerobot-runtime[export]'"
        ) from e
    from runtime.export.compile_precision import cpu_lowering_precision
    from runtime.export.scalar_constants import scalar_bf16_constants

    try:
        # OpenVINO's frontend cannot make a 0-d bf16 constant itself; a CPU blob compiled at bf16 on an
        # AMX CPU keeps fused bf16 MLPs that crash one-thread imports
        with scalar_bf16_constants(), cpu_lowering_precision(snippets=snippets):
            edge = to_edge_transform_and_lower(
                exported, partitioner=[OpenvinoPartitioner([CompileSpec("device", device.encode())])]
            )
    except Exception as e:
        raise ExportError(f"lowering for {device} failed: {type(e).__name__}: {e}") from e
    enforce(check_lowered(edge, device, input_names, output_names), f"the {device} program")
    try:
        return bytes(edge.to_executorch().buffer)
    except Exception as e:
        raise ExportError(f"lowering for {device} failed: {type(e).__name__}: {e}") from e


def _program_entry(data: bytes, device: str, file: str, precision: str) -> ProgramEntry:
    method = parse_program(data, file)["forward"]
    delegation: Literal["full", "partial"] = "full" if method.single_delegate else "partial"
    if method.kernel_ops:
        log.warning(
            "%s: %d op(s) stay on ExecuTorch's portable kernels (%s); the openvino engine cannot run "
            "this program, the executorch engine will",
            file,
            len(method.kernel_ops),
            ", ".join(sorted(set(method.kernel_ops))),
        )
    return ProgramEntry(device, file, precision, sha256_bytes(data), delegation, _version("openvino"))


_TORCH_DTYPE = {"bf16": "bfloat16", "f16": "float16"}


def at_precision(model: Any, precision: str) -> Any:
    """``model`` computing at ``precision`` (bf16 or f16), with the same float32 inputs and outputs.

    Traced under ``torch.autocast``: matrix products and convolutions take their weights and inputs
    cast to ``precision`` and what follows them runs at it, while the ops autocast keeps in float32
    (softmax, norms, reductions) stay there, as a device's own low-precision mode does. The casts are
    ops of the graph, so the lowered program carries its precision whatever the engine passes at load
    (ExecuTorch's OpenVINO backend passes nothing). On a device without native arithmetic of that
    type, OpenVINO widens the values and computes in f32: the rounding of the casts stays.
    """
    torch = _torch()
    dtype = getattr(torch, _TORCH_DTYPE[precision])

    class AtPrecision(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            with torch.autocast("cpu", dtype=dtype):
                out = self.inner(*inputs)
            return torch.utils._pytree.tree_map(
                lambda v: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v, out
            )

    wrapper = AtPrecision(model)
    wrapper.training = False  # not .eval(): a module unlifted from a saved export refuses train()
    return wrapper


def export_for_lowering(model: Any, example: tuple[Any, ...], precision: str) -> Any:
    """The ExportedProgram to lower for ``precision``: ``model`` itself for f32, else cast (see at_precision)."""
    torch = _torch()
    if precision not in _TORCH_DTYPE:
        with torch.no_grad():
            return torch.export.export(model, example)
    with torch.no_grad():
        exported = torch.export.export(at_precision(model, precision), example).run_decompositions({})
    _unify_operand_dtypes(exported.graph_module)
    return exported


def _unify_operand_dtypes(gm: Any) -> None:
    """Cast the float operands of an op to its result's dtype where autocast left them mixed.

    Autocast keeps some weights float32 beside low-precision activations (``layer_norm`` takes a bf16
    input with float32 weight and bias and returns bf16); PyTorch's kernels accept that, ExecuTorch's
    edge dialect does not. The cast is what the kernel does anyway: it computes in the input's dtype.
    """
    torch = _torch()
    graph = gm.graph
    floats = {torch.float32, torch.float16, torch.bfloat16, torch.float64}

    def dtype_of(x: Any) -> Any:
        val = x.meta.get("val") if hasattr(x, "meta") else None
        return val.dtype if isinstance(val, torch.Tensor) else None

    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is torch.ops.aten._to_copy.default:
            continue
        out = node.meta.get("val")
        out = out[0] if isinstance(out, (tuple, list)) and out else out
        if not isinstance(out, torch.Tensor) or out.dtype not in floats:
            continue
        operands = [a for a in node.all_input_nodes if dtype_of(a) in floats]
        if len({dtype_of(a) for a in operands}) < 2:
            continue
        for arg in operands:
            if dtype_of(arg) == out.dtype:
                continue
            with graph.inserting_before(node):
                cast = graph.call_function(torch.ops.aten._to_copy.default, (arg,), {"dtype": out.dtype})
            cast.meta["val"] = arg.meta["val"].to(out.dtype)
            node.replace_input_with(arg, cast)
    graph.lint()
    gm.recompile()


def parse_tolerance(text: str) -> dict[str, float]:
    """``"f32=1e-4,bf16=0.05"`` -> {"f32": 1e-4, "bf16": 0.05}; names the bad entry."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        prec, sep, value = part.partition("=")
        try:
            tol = float(value)
        except ValueError:
            tol = -1.0
        if not sep or prec not in PRECISIONS or not tol >= 0:
            raise ExportError(
                f"--tolerance: expected PRECISION=NUMBER entries with a precision among {', '.join(PRECISIONS)} "
                f"and a non-negative number, got {part!r}"
            )
        out[prec] = tol
    return out


@contextmanager
def staged_directory(out_dir: Path) -> Iterator[Path]:
    """A sibling directory to write into; it replaces ``out_dir`` only when the block succeeds.

    A failed export leaves nothing behind, and an existing bundle at ``out_dir`` stays as it was.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        out_dir.rename(old)
    stage.rename(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_bundle(
    factory: str | Callable[[], tuple[Any, dict[str, Any]]],
    out: str | Path,
    *,
    device: str = "CPU",
    precision: str = "f32",
    control_rate_hz: float = 30.0,
    tolerance: Mapping[str, float] | None = None,
    prove_on_export: bool = True,
    **trace_options: Any,
) -> Bundle:
    """Trace, lower for ``device``, record the eager test case, prove, and write the bundle to ``out``.

    ``trace_options`` go to :func:`runtime.export.trace.trace_policy` (policy_name, action_names,
    image_inputs, action_scale, scale_source, source, description, model_batch, input_roles,
    observation_history, language, rtc). Nothing is left at ``out`` on failure.
    """
    _torch()
    check_device_present(device)
    check_precision(precision)
    trace = trace_policy(factory, steps=(1, TOTAL_STEPS), **trace_options)
    return build_bundle(
        trace,
        out,
        device=device,
        precision=precision,
        control_rate_hz=control_rate_hz,
        tolerance=tolerance,
        prove_on_export=prove_on_export,
    )


TOTAL_STEPS = 5


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS or precision == "int8":
        raise ExportError(
            f"--precision: expected one of f32, f16, bf16 (int8 comes from lerobot-runtime quantize), got {precision!r}"
        )


def _traced_by(trace: Trace) -> str:
    stack = trace.stack
    return ", ".join(f"{k} {stack[k]}" for k in ("lerobot", "transformers", "torch") if k in stack)


def build_bundle(
    trace: Trace,
    out: str | Path,
    *,
    device: str = "CPU",
    precision: str = "f32",
    control_rate_hz: float = 30.0,
    tolerance: Mapping[str, float] | None = None,
    prove_on_export: bool = True,
) -> Bundle:
    """The second half of an export: lower ``trace`` for ``device``, write the bundle, and prove it here.

    The proof is the daemon's load gate, run on the staged bundle in a child process
    (runtime.export.prove); it measures the f32 tolerance the bundle carries, unless ``tolerance``
    gives one. ``prove_on_export`` False writes the default tolerances unproved (tests of the gate
    itself need bundles that fail it).
    """
    torch = _torch()
    check_device_present(device)
    check_precision(precision)
    out_dir = Path(out)
    given = dict(tolerance or {})
    with staged_directory(out_dir) as stage:
        (stage / PORTABLE_FILE).write_bytes(trace.portable)
        with step(3, TOTAL_STEPS, f"lowering to OpenVINO for {device} ({precision})"):
            exported = trace.exported
            if exported is None:
                exported = torch.export.load(io.BytesIO(trace.portable))
            if precision in _TORCH_DTYPE:
                example = tuple(torch.from_numpy(v) for v in trace.example.values())
                try:
                    exported = export_for_lowering(exported.module(), example, precision)
                except Exception as e:
                    raise ExportError(f"torch.export at {precision} failed: {type(e).__name__}: {e}") from e
            names_in = tuple(s.name for s in trace.inputs)
            names_out = tuple(s.name for s in trace.outputs)
            data = lower_program(exported, device, input_names=names_in, output_names=names_out)
            file = f"program_{device.lower()}.pte"
            (stage / file).write_bytes(data)
            program = _program_entry(data, device, file, precision)
        with step(4, TOTAL_STEPS, "writing the test case and manifest"):
            arrays = {f"input/{k}": v for k, v in trace.example.items()}
            arrays.update({f"output/{k}": v for k, v in trace.reference.items()})
            case = io.BytesIO()
            np.savez(case, **arrays)  # type: ignore[arg-type]
            (stage / TEST_CASE_FILE).write_bytes(case.getvalue())
            language_entry = None
            if trace.language is not None:
                from runtime.bundle.tokenizer import TOKENIZER_FILE

                definition = str(trace.language["definition"]).encode()
                (stage / TOKENIZER_FILE).write_bytes(definition)
                fields = {k: v for k, v in trace.language.items() if k != "definition"}
                language_entry = LanguageEntry(FileEntry(TOKENIZER_FILE, sha256_bytes(definition)), **fields)
            tol = dict(DEFAULT_TOLERANCE)
            tol.update(given)
            basis: dict[str, ToleranceBasis] = {"f32": ToleranceBasis("given")} if "f32" in given else {}
            if prove_on_export and "f32" not in given:
                tol["f32"] = F32_CEILING  # provisional: the proof below measures the bundle's own
            source = dict(trace.source)
            if source.get("kind") == "lerobot":
                source["stack"] = dict(trace.stack)
            manifest = Manifest(
                policy_name=trace.policy_name,
                description=trace.description,
                inputs=trace.inputs,
                outputs=trace.outputs,
                action_output=trace.action_output,
                chunk_length=next(s for s in trace.outputs if s.name == trace.action_output).shape[0],
                action_names=trace.action_names,
                control_rate_hz=float(control_rate_hz),
                programs={device: program},
                test_case=TestCaseEntry(
                    TEST_CASE_FILE,
                    sha256_bytes(case.getvalue()),
                    tol,
                    {trace.action_output: trace.action_scale},
                    trace.scale_source,
                    basis,
                ),
                portable_program=FileEntry(PORTABLE_FILE, sha256_bytes(trace.portable)),
                tools=tool_versions(),
                created_utc=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
                source=source,
                model_batch=trace.model_batch,
                observation_history=trace.observation_history,
                language=language_entry,
                rtc=RtcEntry(**trace.rtc) if trace.rtc is not None else None,
            )
            manifest.write(stage)
            Bundle.open(stage, verify_all=True)
        if prove_on_export:
            with step(5, TOTAL_STEPS, "proving the bundle: the load gate on this machine"):
                found = prove.measure(stage, device)
                tol, basis = prove.derive(found, trace.spread, given, _traced_by(trace))
                case_entry = replace(manifest.test_case, tolerance=tol, basis=basis)
                replace(manifest, test_case=case_entry).write(stage)
                log.info(
                    "the load gate %s on this machine (%s engine, %s): %s; tolerance %s",
                    "ran below the program's precision" if found.get("below_program") else "passed",
                    found["engine"],
                    found["precision"],
                    found["describe"],
                    case_entry.describe_tolerance(str(found["precision"]) if found["precision"] in tol else "f32"),
                )
    log.info("bundle written to %s (%s program: %s delegation)", out_dir, device, program.delegation)
    return Bundle.open(out_dir, verify_all=True)


def lower_bundle(path: str | Path, device: str, *, precision: str | None = None) -> Bundle:
    """Add a program for ``device`` to the bundle, lowered from its portable ``.pt2`` on this machine."""
    torch = _torch()
    bundle = Bundle.open(path, verify_all=True)
    m = bundle.manifest
    if m.portable_program is None:
        raise ExportError(f"{path}: the bundle has no portable_program (.pt2) to lower from; re-export it")
    check_device_present(device)
    any_precision = next(iter(m.programs.values())).precision if m.programs else "f32"
    at = precision or any_precision
    with step(1, 2, f"loading {m.portable_program.file}"):
        exported = torch.export.load(str(bundle.path / m.portable_program.file))
        if at in _TORCH_DTYPE:
            # the portable program is float32 (an int8 bundle's is already quantised): cast it to the
            # precision the program carries
            case = bundle.test_case()
            example = tuple(torch.from_numpy(case.inputs[s.name]) for s in m.inputs)
            try:
                exported = export_for_lowering(exported.module(), example, at)
            except Exception as e:
                raise ExportError(f"torch.export at {at} failed: {type(e).__name__}: {e}") from e
    with step(2, 2, f"lowering to OpenVINO for {device} ({at})"):
        data = lower_program(
            exported,
            device,
            input_names=tuple(s.name for s in m.inputs),
            output_names=tuple(s.name for s in m.outputs),
        )
    file = f"program_{device.lower()}.pte"
    (bundle.path / file).write_bytes(data)
    entry = _program_entry(data, device, file, at)
    programs = dict(m.programs)
    programs[device] = entry
    replace(m, programs=programs).write(bundle.path)
    log.info("added %s program %s to %s", device, file, bundle.path)
    return Bundle.open(bundle.path, verify_all=True)
