"""Loading a bundle into a ready engine, on a stand-in bundle and stand-in engines (no export, no
OpenVINO compile): which engine and why, what each is handed, the version check, the parity gate
and its override, warm-up, the report and its timings on a clock the test moves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from runtime.bundle.bundle import TestCase
from runtime.bundle.manifest import TestCaseEntry
from runtime.engine import executorch_engine, loader
from runtime.engine.config import EngineConfig
from runtime.engine.executorch_engine import lower_arithmetic_refusal
from runtime.engine.loader import LoadReport, effective_cache_dir, load_engine
from runtime.engine.parity import ParityResult
from runtime.errors import BundleError, ConfigError, ParityError

STATE = "observation.state"
ACTION = "action"
REF = np.array([[0.5, -1.0], [0.0, 2.0]], np.float32)
OV = "2025.4.1"


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t

    def advance_ms(self, ms: float) -> None:
        self.t += ms / 1e3


class World:
    """What the loader meets: one bundle, OpenVINO's devices and version, the engines it builds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = Clock()
        self.calls: list[str] = []
        self.entries = {
            "CPU": SimpleNamespace(file="programs/cpu.pte", precision="f32", openvino_version=OV),
            "GPU": SimpleNamespace(file="programs/gpu.pte", precision="f16", openvino_version=OV),
        }
        self.manifest = SimpleNamespace(
            programs=self.entries,
            policy_name="tiny",
            int8_float_precision=None,
            int8_crashes="",
            quantization={},
            test_case=TestCaseEntry("test_case.npz", "0" * 64, {"f32": 1e-4}),
        )
        self.case = TestCase({STATE: np.array([1.0, 2.0], np.float32)}, {ACTION: REF.copy()}, {"f32": 1e-4})
        self.present = ["CPU"]
        self.installed = OV
        self.refusal: str | None = None
        self.read_back = ("f32", 2)
        self.cpus = [1, 2, 3]
        self.errors: list[float] = []  # the error of each run, in order; 0 past the list
        self.engines: list[StandIn] = []
        self.method = SimpleNamespace(name="forward")
        self.data = memoryview(b"program bytes")


class StandIn:
    """An engine as the loader builds it: its arguments kept, each run answering the reference."""

    kind = "openvino"

    def __init__(self, world: World, manifest: Any, *args: Any, **kw: Any) -> None:
        world.calls.append(f"{self.kind} engine")
        world.clock.advance_ms(30.0)
        world.engines.append(self)
        self.world = world
        self.manifest = manifest
        self.args = args
        self.kw = kw
        self.runs: list[Mapping[str, np.ndarray]] = []
        self.closed = 0
        self.test_case: TestCase | None = None
        self.pending_gate = None
        self.info = SimpleNamespace(
            engine=self.kind,
            device=kw["device"],
            precision=kw.get("precision") or kw["program_precision"],
            threads=kw.get("threads", 0),
            cpus=tuple(kw["cpus"]),
        )

    def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(self.runs)
        self.runs.append(inputs)
        self.world.clock.advance_ms(2.0)
        out = REF.copy()
        out[1, 0] += self.world.errors[n] if n < len(self.world.errors) else 0.0
        return {ACTION: out}

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> World:
    w = World(tmp_path / "act")

    class Bundle:
        manifest = w.manifest

        @classmethod
        def open(cls, path: Path) -> Bundle:
            w.calls.append(f"open {path}")
            w.clock.advance_ms(10.0)
            return cls()

        def program(self, device: str) -> SimpleNamespace:
            w.calls.append(f"program {device}")
            return w.entries[device]

        def map_program(self, device: str) -> memoryview:
            w.calls.append(f"map {device}")
            return w.data

        def test_case(self) -> TestCase:
            return w.case

    def parse_program(data: object, where: str) -> dict[str, object]:
        assert data is w.data
        w.calls.append(f"parse {where}")
        return {"forward": w.method, "other": object()}

    def inference_cpus(requested: tuple[int, ...], control_cpu: int) -> list[int]:
        w.calls.append(f"cpus {requested} {control_cpu}")
        return list(w.cpus)

    def refusal(method: object) -> str | None:
        assert method is w.method
        return w.refusal

    def version(dist: str) -> str:
        assert dist == "openvino"
        return w.installed

    class OpenVINO(StandIn):
        kind = "openvino"

        def __init__(self, manifest: Any, *args: Any, **kw: Any) -> None:
            super().__init__(w, manifest, *args, **kw)

    class ExecuTorch(StandIn):
        kind = "executorch"

        def __init__(self, manifest: Any, *args: Any, **kw: Any) -> None:
            super().__init__(w, manifest, *args, **kw)

        @staticmethod
        def read_back(method: object, device: str) -> tuple[str, int]:
            assert method is w.method
            w.calls.append(f"read back {device}")
            return w.read_back

    def import_runtime() -> None:
        w.calls.append("import executorch")

    monkeypatch.setattr(loader, "Bundle", Bundle)
    monkeypatch.setattr(loader, "parse_program", parse_program)
    monkeypatch.setattr(loader, "inference_cpus", inference_cpus)
    monkeypatch.setattr(loader, "pin_current_thread", lambda cpus: w.calls.append(f"pin {cpus}"))
    monkeypatch.setattr(loader, "present_devices", lambda: list(w.present))
    monkeypatch.setattr(loader, "direct_engine_refusal", refusal)
    monkeypatch.setattr(loader, "package_version", version)
    monkeypatch.setattr(loader, "OpenVINOEngine", OpenVINO)
    monkeypatch.setattr(executorch_engine, "ExecuTorchEngine", ExecuTorch)
    monkeypatch.setattr(executorch_engine, "import_runtime", import_runtime)
    monkeypatch.setattr(loader, "time", SimpleNamespace(perf_counter=w.clock))  # the loader's clock only
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    return w


def config(world: World, **kw: Any) -> EngineConfig:
    return EngineConfig(**{"bundle": str(world.path), "devices": ("CPU",), "warmup_runs": 2, "parity_runs": 3, **kw})


# --- where things are ------------------------------------------------------------------------------


def test_the_cache_dir_set_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/lerobot")
    assert effective_cache_dir(EngineConfig(cache_dir="/srv/cache")) == "/srv/cache"


def test_the_cache_dir_of_the_systemd_unit_is_the_first_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/lerobot:/var/cache/other")
    assert effective_cache_dir(EngineConfig()) == "/var/cache/lerobot/openvino"
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/lerobot")
    assert effective_cache_dir(EngineConfig()) == "/var/cache/lerobot/openvino"


def test_no_cache_dir_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    assert effective_cache_dir(EngineConfig()) == ""
    monkeypatch.setenv("CACHE_DIRECTORY", "")
    assert effective_cache_dir(EngineConfig()) == ""


def test_no_bundle_is_refused_by_name_and_exports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.export.demo

    monkeypatch.setattr(runtime.export.demo, "ensure_bundle", lambda *a: pytest.fail("the engine exported a bundle"))
    with pytest.raises(ConfigError, match=r"^engine\.bundle: expected the path of a bundle directory, got none$"):
        load_engine(EngineConfig())


def test_an_empty_report_on_the_wire() -> None:
    assert LoadReport().to_json() == {"skipped_devices": [], "engine_reason": "", "parity": None, "timing_ms": {}}


# --- the openvino engine ---------------------------------------------------------------------------


def test_a_program_one_delegate_covers_loads_on_the_openvino_engine(world: World) -> None:
    report = LoadReport()
    engine = load_engine(config(world, cpus=(1, 2, 3), control_cpu=0, cache_dir="/c"), report=report)
    (built,) = world.engines
    assert engine is built
    assert built.manifest is world.manifest and built.args == (world.method,)
    assert built.kw == {
        "device": "CPU",
        "bundle": str(world.path),
        "program": "programs/cpu.pte",
        "precision": "f32",
        "threads": 3,
        "cpus": [1, 2, 3],
        "cache_dir": "/c",
        "compiled_by": OV,
        "program_precision": "f32",
    }
    assert report.engine_reason == "auto: one OpenVINO delegate covers the program"
    assert report.skipped_devices == ()
    assert world.calls == [
        f"open {world.path}",
        "cpus (1, 2, 3) 0",
        "pin [1, 2, 3]",
        "program CPU",
        "map CPU",
        f"parse {world.path / 'programs/cpu.pte'}",
        "openvino engine",
    ]


def test_the_threads_set_and_the_precision_asked_are_passed(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/lr")
    load_engine(config(world, threads=1, precision="bf16"))
    kw = world.engines[0].kw
    assert (kw["threads"], kw["precision"], kw["program_precision"], kw["cache_dir"]) == (
        1,
        "bf16",
        "f32",
        "/var/cache/lr/openvino",
    )


def test_the_openvino_engine_asked_for_is_used_whatever_the_program(world: World) -> None:
    world.refusal = "ops left on ExecuTorch kernels: aten.add"
    report = LoadReport()
    load_engine(config(world, engine="openvino"), report=report)
    assert world.engines[0].kind == "openvino" and report.engine_reason == "requested openvino"


# --- the executorch engine -------------------------------------------------------------------------


def test_a_program_the_openvino_engine_cannot_run_goes_to_executorch(world: World) -> None:
    world.refusal = "ops left on ExecuTorch kernels: aten.add"
    report = LoadReport()
    engine = load_engine(config(world, cpus=(2, 3)), report=report)
    (built,) = world.engines
    assert engine is built and built.kind == "executorch"
    assert report.engine_reason == "auto: ops left on ExecuTorch kernels: aten.add, so executorch"
    assert built.manifest is world.manifest
    data, method = built.args
    assert type(data) is bytes and data == b"program bytes" and method is world.method
    assert built.kw == {
        "device": "CPU",
        "bundle": str(world.path),
        "program": "programs/cpu.pte",
        "requested_precision": None,
        "cpus": [1, 2, 3],
        "program_precision": "f32",
        "read_back": ("f32", 2),
    }
    assert world.calls[-3:] == ["import executorch", "read back CPU", "executorch engine"]


def test_the_executorch_engine_asked_for_gets_the_precision_asked(world: World) -> None:
    report = LoadReport()
    load_engine(config(world, engine="executorch", precision="f16"), report=report)
    assert world.engines[0].kind == "executorch" and report.engine_reason == "requested executorch"
    assert world.engines[0].kw["requested_precision"] == "f16"


def test_lower_arithmetic_on_executorch_is_refused_with_the_ways_out(world: World) -> None:
    world.refusal = "ops left on ExecuTorch kernels: aten.add"
    world.read_back = ("bf16", 2)
    with pytest.raises(BundleError) as info:
        load_engine(config(world))
    assert str(info.value) == lower_arithmetic_refusal(str(world.path), "CPU", "f32", "bf16", world.refusal)
    assert world.engines == []


def test_lower_arithmetic_accepted_loads(world: World) -> None:
    world.read_back = ("bf16", 2)
    load_engine(config(world, engine="executorch", accept_lower_arithmetic=True))
    assert world.engines[0].kw["read_back"] == ("bf16", 2)


def test_an_int8_program_is_not_lower_arithmetic(world: World) -> None:
    world.entries["CPU"].precision = "int8"
    world.read_back = ("bf16", 2)
    world.case = TestCase(world.case.inputs, world.case.outputs, {"f32": 1e-4, "int8": 1e-3})
    load_engine(config(world, engine="executorch"))
    assert world.engines[0].kw["program_precision"] == "int8"


def test_an_int8_program_proven_only_with_f32_float_layers_runs_them_at_f32(world: World) -> None:
    world.entries["CPU"].precision = "int8"
    world.case = TestCase(world.case.inputs, world.case.outputs, {"f32": 1e-4, "int8": 1e-3})
    load_engine(config(world))
    assert world.engines[-1].kw["precision"] == "int8"  # no float precision recorded: the CPU's default
    world.manifest.int8_float_precision = "f32"
    world.manifest.quantization = {"gate": {"crashed": {"bf16": "SIGFPE"}, "float_precision": "f32"}}
    load_engine(config(world))
    assert world.engines[-1].kind == "openvino"
    assert world.engines[-1].kw["precision"] == "f32" and world.engines[-1].kw["program_precision"] == "int8"
    load_engine(config(world, precision="bf16"))
    assert world.engines[-1].kw["precision"] == "bf16"  # asked for in the config: the request wins


def test_an_int8_program_proven_only_with_f32_float_layers_is_refused_by_executorch(world: World) -> None:
    world.entries["CPU"].precision = "int8"
    world.manifest.int8_float_precision = "f32"
    world.manifest.quantization = {"gate": {"crashed": {"bf16": "SIGFPE"}, "float_precision": "f32"}}
    world.manifest.int8_crashes = "bf16: SIGFPE"
    with pytest.raises(BundleError) as info:
        load_engine(config(world, engine="executorch"))
    assert str(info.value) == (
        f"{world.path}: this INT8 program's float layers are proven at f32 only (OpenVINO crashed running them "
        "at bf16: SIGFPE when it was quantised); the executorch engine runs them at the CPU's default and cannot "
        'be told otherwise. Use the openvino engine ([engine] engine = "openvino")'
    )
    assert world.engines == []


# --- device and version ----------------------------------------------------------------------------


def test_the_device_passed_over_is_reported_and_the_next_one_loads(world: World) -> None:
    world.present = ["CPU"]
    report = LoadReport()
    load_engine(config(world, devices=("GPU", "CPU")), report=report)
    assert report.skipped_devices == ("GPU: not present (OpenVINO sees CPU)",)
    assert world.engines[0].kw["device"] == "CPU"


def test_the_first_device_present_with_a_program_loads_its_program(world: World) -> None:
    world.present = ["CPU", "GPU"]
    report = LoadReport()
    load_engine(config(world, devices=("NPU", "GPU", "CPU")), report=report)
    assert report.skipped_devices == ("NPU: not present (OpenVINO sees CPU, GPU)",)
    kw = world.engines[0].kw
    assert (kw["device"], kw["program"], kw["precision"]) == ("GPU", "programs/gpu.pte", "f16")
    assert f"parse {world.path / 'programs/gpu.pte'}" in world.calls


def test_a_program_compiled_by_another_openvino_is_refused(world: World) -> None:
    world.installed = "2025.3.0"
    with pytest.raises(BundleError) as info:
        load_engine(config(world))
    assert str(info.value) == (
        f"{world.path}: the CPU program was compiled by OpenVINO {OV}, this machine has 2025.3.0; a compiled "
        f"blob only imports on the version that made it. Re-make it here with: lerobot-runtime lower "
        f"{world.path} --device CPU"
    )
    assert world.engines == [] and "map CPU" not in world.calls


def test_a_program_that_names_no_openvino_version_is_not_checked(world: World) -> None:
    world.entries["CPU"].openvino_version = ""
    world.installed = "2025.3.0"
    assert load_engine(config(world)) is world.engines[0]


# --- parity gate, warm-up, report ------------------------------------------------------------------


def test_the_parity_runs_then_the_warm_up_and_the_report_times_each(world: World) -> None:
    report = LoadReport()
    engine = load_engine(config(world, warmup_runs=2, parity_runs=3), report=report)
    built = world.engines[0]
    assert len(built.runs) == 5 and engine.test_case is world.case
    assert all(r is not world.case.inputs for r in built.runs[:3])  # the gate replays copies
    assert all(r is world.case.inputs for r in built.runs[3:])
    assert isinstance(report.parity, ParityResult) and report.parity.ok and report.parity.runs == 3
    assert report.timing_ms == pytest.approx(
        {"open": 10.0, "compile": 30.0, "load": 40.0, "parity": 6.0, "warmup": 4.0, "ready": 50.0}
    )
    assert list(report.timing_ms) == ["open", "compile", "load", "parity", "warmup", "ready"]
    assert built.closed == 0
    wire = report.to_json()
    assert wire["parity"] == report.parity.to_json() and wire["timing_ms"] == report.timing_ms
    assert wire["timing_ms"] is not report.timing_ms


def test_a_staged_load_is_ready_after_the_first_replays_and_leaves_the_rest_to_run_before_serving(
    world: World,
) -> None:
    report = LoadReport()
    engine = load_engine(config(world, warmup_runs=2, parity_runs=5, ready_runs=2), report=report, staged=True)
    built = world.engines[0]
    assert len(built.runs) == 2  # two replays, no warm-up: the remaining replays are the warm-up
    assert report.parity is not None and report.parity.ok and report.parity.runs == 2
    assert report.timing_ms == pytest.approx(
        {"open": 10.0, "compile": 30.0, "load": 40.0, "parity": 4.0, "warmup": 0.0, "ready": 44.0}
    )
    gate = engine.pending_gate
    assert gate is not None and (gate.passed, gate.runs, gate.done) == (2, 5, False)
    assert gate.describe() == "2 of 5 replays passed" and engine.test_case is world.case
    result = gate.finish()
    assert len(built.runs) == 5 and all(r is not world.case.inputs for r in built.runs)
    assert result.ok and result.runs == 5 and (gate.passed, gate.done) == (5, True)
    assert gate.finish() is result and len(built.runs) == 5  # finished once


def test_the_rest_of_a_staged_gate_fails_on_the_replay_that_fails_numbered_in_the_whole_gate(world: World) -> None:
    world.errors = [0.0, 0.0, 0.0, 0.5]  # the 4th replay is wrong
    engine = load_engine(config(world, parity_runs=6, ready_runs=2), staged=True)
    gate = engine.pending_gate
    assert gate is not None
    result = gate.finish()
    assert not result.ok and (result.failed_run, result.runs) == (4, 6)
    assert "on replay 4 of 6" in result.describe()
    assert gate.done and gate.passed == 3 and len(world.engines[0].runs) == 4  # stopped at the failure


def test_a_replay_that_fails_before_ready_refuses_the_load_numbered_in_the_whole_gate(world: World) -> None:
    world.errors = [0.0, 0.5]
    with pytest.raises(ParityError, match=r"on replay 2 of 6; tolerance"):
        load_engine(config(world, parity_runs=6, ready_runs=3), staged=True)
    assert world.engines[0].closed == 1


@pytest.mark.parametrize(
    "kw",
    [
        {"ready_runs": 3, "parity_runs": 3},  # every replay before ready anyway
        {"ready_runs": 5, "parity_runs": 3},
        {"ready_runs": 1, "parity_runs": 3, "allow_parity_failure": True},  # its baseline is set at load
    ],
)
def test_a_staged_load_runs_the_whole_gate_when_nothing_is_left_or_a_failure_may_be_served(
    world: World, kw: dict[str, Any]
) -> None:
    engine = load_engine(config(world, warmup_runs=1, **kw), staged=True)
    assert engine.pending_gate is None
    assert len(world.engines[0].runs) == 3 + 1  # the three replays and the warm-up


def test_a_load_that_is_not_staged_runs_the_whole_gate_whatever_ready_runs_says(world: World) -> None:
    engine = load_engine(config(world, warmup_runs=0, parity_runs=4, ready_runs=1))
    assert engine.pending_gate is None and len(world.engines[0].runs) == 4


def test_no_warm_up_and_a_single_parity_run(world: World) -> None:
    report = LoadReport()
    load_engine(config(world, warmup_runs=0, parity_runs=1), report=report)
    assert len(world.engines[0].runs) == 1
    assert report.timing_ms["warmup"] == 0.0 and report.timing_ms["parity"] == pytest.approx(2.0)


def test_a_load_without_a_report_still_loads(world: World) -> None:
    assert load_engine(config(world)) is world.engines[0]


def test_a_parity_failure_is_refused_and_the_engine_closed(world: World) -> None:
    world.errors = [0.0, 0.5]
    report = LoadReport()
    with pytest.raises(ParityError) as info:
        load_engine(config(world, parity_runs=3), report=report)
    built = world.engines[0]
    assert report.parity is not None and not report.parity.ok and report.parity.failed_run == 2
    assert str(info.value) == (
        f"{world.path}: the program does not reproduce its reference; refusing to serve: "
        f"{report.parity.describe()}; tolerance 0.0001, the default (not measured at export). The bundle's f32 "
        "tolerance was not measured when it was exported: export it again (an export now measures it and proves "
        "the bundle on the exporting machine); or engine.allow_parity_failure = true (--allow-parity-failure) "
        "serves it anyway, the canary then holding it to what it computes here"
    )
    assert built.closed == 1 and built.test_case is None and len(built.runs) == 2
    assert "on replay 2 of 3" in str(info.value)


def test_a_parity_failure_allowed_serves_anyway(world: World) -> None:
    world.errors = [0.5, 0.5]
    report = LoadReport()
    engine = load_engine(config(world, allow_parity_failure=True, warmup_runs=1, parity_runs=2), report=report)
    assert report.parity is not None and not report.parity.ok
    assert world.engines[0].closed == 0
    assert len(world.engines[0].runs) == 3  # the failing replay, what the program computes now, the warm-up
    # the canary holds it to what it computed at load, not to the reference it was accepted missing: the same
    # error is not refused seconds later, a drift from it is
    case = engine.test_case
    assert case is not None and case.baseline == "what the program computed when it was loaded"
    expected = REF.copy()
    expected[1, 0] += 0.5
    assert np.array_equal(case.outputs[ACTION], expected) and case.inputs is world.case.inputs
    assert case.tolerance == world.case.tolerance


def test_a_parity_failure_on_a_bundle_proved_on_another_cpu_says_to_export_it_here(world: World) -> None:
    from dataclasses import replace

    from runtime.bundle.manifest import ToleranceBasis

    basis = ToleranceBasis("measured", lowered_error=1e-5, lowered_by="openvino engine at f32 on CPU (avx2)")
    world.manifest.test_case = replace(world.manifest.test_case, basis={"f32": basis})
    world.errors = [0.5]
    with pytest.raises(ParityError) as info:
        load_engine(config(world, parity_runs=1))
    assert "The bundle was proved on another CPU (openvino engine at f32 on CPU (avx2); this one: " in str(info.value)
    assert str(info.value).endswith(
        "export it on this machine, which measures its tolerance here; or engine.allow_parity_failure = true "
        "(--allow-parity-failure) serves it anyway, the canary then holding it to what it computes here"
    )


def test_a_device_present_without_a_program_is_passed_over_naming_the_bundle(world: World) -> None:
    world.present = ["CPU", "NPU"]
    report = LoadReport()
    load_engine(config(world, devices=("NPU", "CPU")), report=report)
    assert report.skipped_devices == (
        f"NPU: present, but the bundle has no NPU program (make one with: lerobot-runtime lower {world.path} "
        "--device NPU)",
    )
