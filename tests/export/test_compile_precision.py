"""What OpenVINO is told while a CPU program is lowered: f32, no snippets (INT8 programs keep them),
whatever this CPU's default.

On a CPU with AMX the plugin's default (bf16) fuses MLPs into a bf16 node that stays in the blob and
kills a one-thread import with SIGFPE; a blob with snippets tokenized at one precision may not import
at another. The export-marked test exports a gate/up/down MLP and reads the imported graph back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from runtime.export.compile_precision import cpu_lowering_precision


class Compiled:
    """What the stand-in compiles: a blob of the properties it was compiled with."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def export_model(self) -> bytes:
        return repr(self.config).encode()


class RecordingCore:
    """Stands in for openvino.Core in OpenVINO's PyTorch compile module: records what it is told, and
    which blobs were imported back (each import refused while ``refuse_imports`` says so)."""

    calls: ClassVar[list[tuple[Any, str | None, Any]]] = []
    imports: ClassVar[list[tuple[bytes, str]]] = []
    refuse_imports: ClassVar[list[str]] = []

    def compile_model(self, model: Any, device_name: str | None = None, config: Any = None) -> Any:
        RecordingCore.calls.append((model, device_name, config))
        return Compiled(config)

    def import_model(self, blob: bytes, device_name: str) -> Any:
        RecordingCore.imports.append((blob, device_name))
        if RecordingCore.refuse_imports:
            raise RuntimeError(RecordingCore.refuse_imports.pop(0))
        return "imported"


@pytest.fixture
def recording_core(monkeypatch: pytest.MonkeyPatch) -> type[RecordingCore]:
    from openvino.frontend.pytorch.torchdynamo import compile as ov_compile

    RecordingCore.calls, RecordingCore.imports, RecordingCore.refuse_imports = [], [], []
    monkeypatch.setattr(ov_compile, "Core", RecordingCore)
    return RecordingCore


def test_a_cpu_compile_is_told_f32_without_snippets(recording_core: type[RecordingCore]) -> None:
    from openvino.frontend.pytorch.torchdynamo import compile as ov_compile

    with cpu_lowering_precision():
        assert isinstance(ov_compile.Core().compile_model("model", "CPU"), Compiled)
        ov_compile.Core().compile_model("model", "CPU", {"CACHE_DIR": "/c"})
    assert recording_core.calls == [
        ("model", "CPU", {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": "DISABLE"}),
        ("model", "CPU", {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": "DISABLE", "CACHE_DIR": "/c"}),
    ]


def test_an_int8_programs_compile_keeps_snippets(recording_core: type[RecordingCore]) -> None:
    from openvino.frontend.pytorch.torchdynamo import compile as ov_compile

    from runtime.export.compile_precision import lowering_config

    with cpu_lowering_precision(snippets=True):
        compiled = ov_compile.Core().compile_model("model", "CPU")
        ov_compile.Core().compile_model("model", "GPU")
    assert recording_core.calls == [("model", "CPU", {"INFERENCE_PRECISION_HINT": "f32"}), ("model", "GPU", {})]
    assert compiled.config == {"INFERENCE_PRECISION_HINT": "f32"}
    # imported back once, at the plugin's defaults, as the engines import an INT8 program
    assert recording_core.imports == [(compiled.export_model(), "CPU")]
    assert lowering_config("CPU", {"SNIPPETS_MODE": "DISABLE"}, snippets=True) == {
        "INFERENCE_PRECISION_HINT": "f32",
        "SNIPPETS_MODE": "DISABLE",  # the caller's own word stands
    }


def test_with_snippets_that_do_not_import_it_is_compiled_again_without_them(
    recording_core: type[RecordingCore], caplog: pytest.LogCaptureFixture
) -> None:
    from openvino.frontend.pytorch.torchdynamo import compile as ov_compile

    recording_core.refuse_imports = ["Exception from snippets:\nSupported precisions set is not available"]
    with caplog.at_level("WARNING", logger="runtime.export.compile_precision"), cpu_lowering_precision(snippets=True):
        compiled = ov_compile.Core().compile_model("model", "CPU")
    assert [c[2] for c in recording_core.calls] == [
        {"INFERENCE_PRECISION_HINT": "f32"},
        {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": "DISABLE"},
    ]
    assert compiled.config == {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": "DISABLE"}
    assert len(recording_core.imports) == 1  # the program without snippets is not imported here
    assert "(Exception from snippets: Supported precisions set is not available); compiling it without" in caplog.text


def test_a_property_the_caller_sets_is_kept(recording_core: type[RecordingCore]) -> None:
    from openvino.frontend.pytorch.torchdynamo import compile as ov_compile

    with cpu_lowering_precision():
        ov_compile.Core().compile_model("model", "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
    assert recording_core.calls == [
        ("model", "CPU", {"INFERENCE_PRECISION_HINT": "bf16", "SNIPPETS_MODE": "DISABLE"}),
    ]


@pytest.mark.parametrize("device", ["GPU", "NPU"])
def test_other_devices_are_compiled_as_asked(recording_core: type[RecordingCore], device: str) -> None:
    from openvino.frontend.pytorch.torchdynamo import compile as ov_compile

    with cpu_lowering_precision():
        ov_compile.Core().compile_model("model", device)
        ov_compile.Core().compile_model("model", device, {"CACHE_DIR": "/c"})
    assert recording_core.calls == [("model", device, {}), ("model", device, {"CACHE_DIR": "/c"})]


def test_the_lowering_config_of_each_device() -> None:
    from runtime.export.compile_precision import lowering_config

    assert lowering_config("CPU", None) == {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": "DISABLE"}
    assert lowering_config("CPU", {"SNIPPETS_MODE": "ENABLE", "X": 1}) == {
        "INFERENCE_PRECISION_HINT": "f32",
        "SNIPPETS_MODE": "ENABLE",
        "X": 1,
    }
    given = {"X": 1}
    assert lowering_config("GPU", given) == given and lowering_config("GPU", given) is not given
    assert lowering_config(None, None) == {}


def test_the_compile_module_gets_its_core_back(recording_core: type[RecordingCore]) -> None:
    from openvino.frontend.pytorch.torchdynamo import compile as ov_compile

    with cpu_lowering_precision():
        assert ov_compile.Core is not recording_core
    assert ov_compile.Core is recording_core
    with pytest.raises(KeyError), cpu_lowering_precision():
        raise KeyError("lowering failed")
    assert ov_compile.Core is recording_core


def test_a_real_compile_reports_f32_and_fuses_no_subgraph() -> None:
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.frontend.pytorch.torchdynamo import compile as ov_compile

    def layer_types(compiled: Any) -> list[str]:
        return [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()]

    x = ops.parameter([1, 64], np.float32)
    chain = ops.add(ops.multiply(ops.sigmoid(ops.relu(x)), ops.exp(x)), ops.tanh(x))
    model = ov.Model([chain], [x])
    assert "Subgraph" in layer_types(ov.Core().compile_model(model, "CPU"))  # snippets fuse the chain
    with cpu_lowering_precision():
        compiled = ov_compile.Core().compile_model(model, "CPU")
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    assert "Subgraph" not in layer_types(compiled)


# The importing side runs in a child: a blob carrying OpenVINO's fused MLP kills a one-thread import
# with SIGFPE on a CPU with AMX, which must fail this test, not end the test session.
_IMPORT_ONE_THREAD = """
import sys
from collections import Counter
import openvino as ov
from runtime.bundle.pte import parse_program
program = open(sys.argv[1], "rb").read()
blob = bytes(parse_program(program)["forward"].delegates[0].payload)
for hint in ("f32", "bf16"):
    compiled = ov.Core().import_model(blob, "CPU", {"INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": 1})
    kinds = Counter(op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops())
    print(hint, kinds["LLMMLP"], kinds["Subgraph"], kinds["FullyConnected"])
"""


@pytest.mark.export
def test_a_gated_mlp_program_imports_on_one_thread_at_either_precision(tmp_path: Path) -> None:
    import torch

    from runtime.export.export import lower_program

    class GatedMLP(torch.nn.Module):
        """The gate/up/down shape of SmolVLA's language model layers, its weights kept in bf16."""

        def __init__(self) -> None:
            super().__init__()
            self.gate = torch.nn.Linear(256, 512, bias=False)
            self.up = torch.nn.Linear(256, 512, bias=False)
            self.down = torch.nn.Linear(512, 256, bias=False)

        def forward(self, x: Any) -> Any:
            linear = torch.nn.functional.linear
            gate, up = linear(x, self.gate.weight.float()), linear(x, self.up.weight.float())
            return linear(torch.nn.functional.silu(gate) * up, self.down.weight.float())

    torch.manual_seed(0)
    exported = torch.export.export(GatedMLP().eval().to(torch.bfloat16), (torch.randn(1, 16, 256),))
    program = tmp_path / "mlp.pte"
    program.write_bytes(lower_program(exported, "CPU"))
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_ONE_THREAD, str(program)], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, f"import on one thread died ({out.returncode}): {out.stderr[-2000:]}"
    # no fused MLP, no snippets subgraph, the three projections as plain layers at both precisions
    assert out.stdout.split("\n")[:2] == ["f32 0 0 3", "bf16 0 0 3"]
