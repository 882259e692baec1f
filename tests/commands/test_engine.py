"""``lerobot-runtime export``, ``lower``, ``quantize``, ``check`` and ``bench engine`` in process: the CPU
and device lists, every option, the refusals of options that do not apply (exit 78), what the exporter,
lowering, quantizer, loader and benchmark are handed, ``check``'s report on a clock the test moves, its
exit status, and what each prints; no model is exported or compiled."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

import runtime.bench.engine
import runtime.bench.stats
import runtime.bundle.bundle
import runtime.commands.engine
import runtime.engine.loader
import runtime.export.demo
import runtime.export.export
import runtime.export.lerobot
import runtime.export.quantize
from runtime.bundle.manifest import TestCaseEntry, ToleranceBasis
from runtime.cli import build_parser, main
from runtime.commands.engine import parse_cpu_list, parse_devices
from runtime.engine.config import EngineConfig
from runtime.errors import BundleError, ParityError
from tests.commands.parsers import handler, options


def _errors(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]


# --- CPU and device lists ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("1-3,5", (1, 2, 3, 5)), (" 2 , ", (2,)), ("", ()), ("0", (0,)), ("3-3", (3,)), ("4-6,1", (4, 5, 6, 1))],
)
def test_cpu_lists_in_each_form(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["a", "1-b", "1-2-3", "x,1", "-1"])
def test_a_cpu_list_that_is_not_numbers_is_refused_saying_what_was_expected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse_cpu_list(text)
    assert str(err.value) == f"expected a CPU list like 1-3,5, got {text!r}"
    assert err.value.__cause__ is None and err.value.__suppress_context__


@pytest.mark.parametrize(
    ("text", "devices"),
    [
        ("npu, gpu", ("NPU", "GPU")),
        ("CPU", ("CPU",)),
        ("cpu,,GPU,", ("CPU", "GPU")),
        ("NPU,GPU,CPU", ("NPU", "GPU", "CPU")),
    ],
)
def test_device_lists_in_any_case(text: str, devices: tuple[str, ...]) -> None:
    assert parse_devices(text) == devices


@pytest.mark.parametrize("text", ["TPU", "", ",", "CPU,TPU", "XXCPUXX"])
def test_a_device_list_naming_no_device_or_an_unknown_one_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse_devices(text)
    assert str(err.value) == f"expected devices among CPU, GPU, NPU (comma-separated), got {text!r}"


# --- options -------------------------------------------------------------------------------------

ENGINE_OPTIONS = [
    ("--engine", "auto", None, ["auto", "openvino", "executorch"], False, None, None),
    (
        "--device",
        ("NPU", "GPU", "CPU"),
        parse_devices,
        None,
        False,
        "LIST",
        "device preference list, e.g. NPU,GPU,CPU (default)",
    ),
    (
        "--precision",
        "auto",
        None,
        ["auto", "f32", "f16", "bf16"],
        False,
        None,
        "INFERENCE_PRECISION_HINT (auto: the precision the program was lowered with)",
    ),
    (
        "--cpus",
        (),
        parse_cpu_list,
        None,
        False,
        "LIST",
        "inference CPU set, e.g. 1-3 (default: all but the control CPU)",
    ),
    ("--control-cpu", 0, int, None, False, None, "CPU kept for the control loop (default 0)"),
    ("--threads", 0, int, None, False, None, "inference threads (default: one per inference CPU)"),
    (
        "--accept-lower-arithmetic",
        False,
        None,
        None,
        False,
        None,
        "let the executorch engine run a program below its precision where the device defaults lower (an f32 "
        "program at bf16 on a CPU with native bf16), held to that tolerance",
    ),
]


def test_the_export_options() -> None:
    root = build_parser()
    assert options("export", root=root) == [
        (
            "--factory",
            None,
            None,
            None,
            False,
            "FILE.py:FUNC",
            "FUNC() returns (torch.nn.Module, dict of named example input tensors)",
        ),
        (
            "--lerobot",
            None,
            None,
            None,
            False,
            "CHECKPOINT_DIR",
            "a LeRobot checkpoint directory (config.json, model.safetensors, policy_*processor files)",
        ),
        ("--out", None, None, None, True, "DIR", None),
        ("--device", "CPU", None, ["CPU", "GPU", "NPU"], False, None, None),
        ("--precision", "f32", None, ["f32", "f16", "bf16"], False, None, None),
        (
            "--name",
            None,
            None,
            None,
            False,
            None,
            "policy name (default: the factory function's name, or lerobot_<type>)",
        ),
        (
            "--action-names",
            None,
            None,
            None,
            False,
            None,
            "comma-separated joint names (default: from the checkpoint, else SO-101 joints for a 6-dim factory)",
        ),
        (
            "--image-inputs",
            None,
            None,
            None,
            False,
            None,
            "comma-separated names of the camera inputs (default: uint8 HxWxC inputs and inputs whose name "
            "contains 'image')",
        ),
        (
            "--n-action-steps",
            None,
            int,
            None,
            False,
            None,
            "--lerobot: steps of each chunk to serve (default: the config's)",
        ),
        (
            "--vlm-dir",
            None,
            None,
            None,
            False,
            "DIR",
            "--lerobot SmolVLA: the local directory of its VLM (config, processor, tokenizer; the weights too when "
            "the checkpoint says load_vlm_weights), instead of the checkpoint's vlm_model_name (a directory, or a "
            "model in the local Hugging Face cache; never downloaded)",
        ),
        (
            "--rtc",
            False,
            None,
            None,
            False,
            None,
            "--lerobot SmolVLA: real-time chunking (the program takes the previous chunk's leftover and guides the "
            "flow towards it, LeRobot's RTC; on by itself when the checkpoint's rtc_config enables it)",
        ),
        (
            "--lerobot-python",
            None,
            None,
            None,
            False,
            "PYTHON",
            "--lerobot: a Python with the LeRobot release that wrote the checkpoint, which traces it (default: "
            "this Python, $LEROBOT_RUNTIME_LEROBOT_PYTHON or .venv-lerobot-<release> beside the checkout, "
            "whichever has that release)",
        ),
        (
            "--tolerance",
            None,
            None,
            None,
            False,
            "PREC=ERR,...",
            "parity tolerance per precision, in the test case's units (normalised action units for LeRobot "
            "checkpoints), e.g. f32=1e-4,bf16=0.05; the f32 one is measured at export when not given",
        ),
        ("--control-rate-hz", 30.0, float, None, False, None, None),
    ]


def test_the_lower_quantize_and_check_options() -> None:
    root = build_parser()
    assert options("lower", root=root) == [
        ("bundle", None, None, None, True, "BUNDLE", None),
        ("--device", None, None, ["CPU", "GPU", "NPU"], True, None, None),
        ("--precision", None, None, ["f32", "f16", "bf16"], False, None, None),
    ]
    assert options("quantize", root=root) == [
        ("bundle", None, None, None, True, "BUNDLE", "an f32 bundle with its portable program (model.pt2)"),
        (
            "--calibration",
            None,
            None,
            None,
            True,
            "DIR",
            "recorded observations: a LeRobot dataset (v3.0, a local directory), or a directory of .npz files, "
            "one observation each, arrays named as the inputs",
        ),
        (
            "--calibration-frames",
            256,
            int,
            None,
            False,
            "N",
            "frames sampled evenly from a LeRobot dataset (default 256)",
        ),
        ("--out", None, None, None, True, "DIR", None),
        (
            "--max-error",
            None,
            float,
            None,
            False,
            None,
            "largest INT8-vs-f32 action error on held-out observations, in normalised action units (default 0.2)",
        ),
        ("--held-out", 0.25, float, None, False, None, "fraction of observations held out (default 0.25)"),
    ]
    assert options("check", root=root) == [
        ("bundle", "", None, None, False, "BUNDLE", "bundle directory (default: the built-in demo bundle)"),
        *ENGINE_OPTIONS,
        ("--runs", 30, int, None, False, None, "timed inferences after warm-up (default 30)"),
        ("--parity-runs", 16, int, None, False, None, "replays of the test case, each checked (default 16)"),
        ("--allow-parity-failure", False, None, None, False, None, None),
        ("--json", False, None, None, False, None, "print one JSON object"),
    ]


def test_the_bench_engine_options() -> None:
    root = build_parser()
    assert options("bench", "engine", root=root) == [
        (
            "--factory",
            "runtime.policies.act:make_act_policy",
            None,
            None,
            False,
            "FILE.py:FUNC",
            "model factory (default: the ACT-size model)",
        ),
        ("--lerobot", "", None, None, False, "CHECKPOINT_DIR", "bench a LeRobot checkpoint instead"),
        ("--vlm-dir", None, None, None, False, "DIR", "--lerobot SmolVLA: its VLM's local directory"),
        (
            "--calibration",
            "",
            None,
            None,
            False,
            "DIR",
            "recorded observations for the INT8 rows (default: synthetic ones around the test case)",
        ),
        (
            "--precisions",
            "f32,bf16,int8",
            None,
            None,
            False,
            None,
            "comma-separated rows to build (default f32,bf16,int8)",
        ),
        ("--runs", 20, int, None, False, None, None),
        ("--cpus", (), parse_cpu_list, None, False, "LIST", None),
        ("--control-cpu", 0, int, None, False, None, None),
        ("--threads", 0, int, None, False, None, None),
        (
            "--no-peer",
            False,
            None,
            None,
            False,
            None,
            "leave out the peer row (OpenVINO + NNCF INT8 straight from PyTorch, same calibration)",
        ),
        (
            "--bundles",
            "",
            None,
            None,
            False,
            "DIR",
            "build the programs into DIR/<precision> and reuse those a previous run left there",
        ),
        (
            "--one-at-a-time",
            False,
            None,
            None,
            False,
            None,
            "load one precision's engines at a time, each timed against eager, then closed (for programs that do "
            "not all fit in memory at once)",
        ),
        ("--json", False, None, None, False, None, None),
    ]
    engine = runtime.commands.engine
    assert handler("export", "--factory", "f.py:f", "--out", "o", root=root) is engine.cmd_export
    assert handler("lower", "b", "--device", "CPU", root=root) is engine.cmd_lower
    assert handler("quantize", "b", "--calibration", "c", "--out", "o", root=root) is engine.cmd_quantize
    assert handler("check", root=root) is engine.cmd_check
    assert handler("bench", "engine", root=root) is engine.cmd_bench_engine


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--out", "o"],  # --factory or --lerobot
        ["export", "--factory", "f.py:f", "--lerobot", "d", "--out", "o"],
        ["export", "--factory", "f.py:f"],  # --out
        ["lower", "b"],  # --device
        ["quantize", "b", "--out", "o"],  # --calibration
        ["check", "--device", "TPU"],
        ["check", "--cpus", "x"],
    ],
)
def test_a_bad_command_line_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2


# --- export, lower, quantize ---------------------------------------------------------------------


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(runtime.export.export, "parse_tolerance", lambda text: {"parsed": text})

    def export(kind: str) -> Any:
        def run(*args: Any, **kw: Any) -> SimpleNamespace:
            calls.append((kind, args, kw))
            return SimpleNamespace(path=Path("/out/bundle"))

        return run

    monkeypatch.setattr(runtime.export.export, "export_bundle", export("factory"))
    monkeypatch.setattr(runtime.export.lerobot, "export_lerobot", export("lerobot"))
    return calls


def test_export_of_a_factory_hands_over_every_option(exports: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--factory", "m.py:make", "--out", "/out"]) == 0
    argv = [
        "--device",
        "GPU",
        "--precision",
        "bf16",
        "--name",
        "p",
        "--action-names",
        "a, b,,c",
        "--image-inputs",
        "cam",
    ]
    assert (
        main(
            [
                "export",
                "--factory",
                "m.py:make",
                "--out",
                "/o2",
                *argv,
                "--tolerance",
                "f32=1",
                "--control-rate-hz",
                "50",
            ]
        )
        == 0
    )
    assert exports == [
        (
            "factory",
            ("m.py:make", "/out"),
            {
                "device": "CPU",
                "precision": "f32",
                "policy_name": None,
                "action_names": None,
                "control_rate_hz": 30.0,
                "image_inputs": None,
                "tolerance": None,
            },
        ),
        (
            "factory",
            ("m.py:make", "/o2"),
            {
                "device": "GPU",
                "precision": "bf16",
                "policy_name": "p",
                "action_names": ("a", "b", "c"),
                "control_rate_hz": 50.0,
                "image_inputs": ("cam",),
                "tolerance": {"parsed": "f32=1"},
            },
        ),
    ]
    assert capsys.readouterr().out == "/out/bundle\n/out/bundle\n"


def test_export_of_a_checkpoint_hands_over_every_option(exports: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--lerobot", "/ckpt", "--out", "/out"]) == 0
    argv = ["--n-action-steps", "10", "--action-names", "x", "--name", "v", "--vlm-dir", "/vlm", "--rtc"]
    argv += ["--lerobot-python", "/py"]
    assert main(["export", "--lerobot", "/ckpt", "--out", "/o", "--precision", "f16", *argv, "--tolerance", "t"]) == 0
    assert exports == [
        (
            "lerobot",
            ("/ckpt", "/out"),
            {
                "device": "CPU",
                "precision": "f32",
                "n_action_steps": None,
                "action_names": None,
                "control_rate_hz": 30.0,
                "tolerance": None,
                "policy_name": None,
                "vlm_dir": None,
                "rtc": False,
                "lerobot_python": None,
            },
        ),
        (
            "lerobot",
            ("/ckpt", "/o"),
            {
                "device": "CPU",
                "precision": "f16",
                "n_action_steps": 10,
                "action_names": ("x",),
                "control_rate_hz": 30.0,
                "tolerance": {"parsed": "t"},
                "policy_name": "v",
                "vlm_dir": "/vlm",
                "rtc": True,
                "lerobot_python": "/py",
            },
        ),
    ]
    assert capsys.readouterr().out == "/out/bundle\n/out/bundle\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--lerobot", "/c", "--image-inputs", "cam"],
            "--image-inputs: a LeRobot checkpoint names its cameras itself (VISUAL features)",
        ),
        (["--factory", "m.py:f", "--vlm-dir", "/v"], "--vlm-dir applies to --lerobot SmolVLA checkpoints"),
        (["--factory", "m.py:f", "--rtc"], "--rtc applies to --lerobot SmolVLA checkpoints"),
        (
            ["--factory", "m.py:f", "--n-action-steps", "5"],
            "--n-action-steps applies to --lerobot checkpoints; a factory's model sets its chunk",
        ),
    ],
)
def test_an_export_option_that_does_not_apply_is_refused_before_exporting(
    argv: list[str], message: str, exports: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    assert main(["export", *argv, "--out", "/o"]) == 78
    assert exports == []
    assert _errors(caplog) == [("runtime.cli", message)]


def test_lower_hands_over_the_bundle_device_and_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(runtime.export.export, "lower_bundle", lambda *a, **kw: calls.append((a, kw)))
    assert main(["lower", "/b", "--device", "GPU"]) == 0
    assert main(["lower", "/b", "--device", "NPU", "--precision", "f16"]) == 0
    assert calls == [(("/b", "GPU"), {"precision": None}), (("/b", "NPU"), {"precision": "f16"})]


def test_quantize_hands_over_its_settings_and_prints_the_gate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[Any] = []

    def quantize_bundle(*args: Any, **kw: Any) -> SimpleNamespace:
        calls.append((args, kw))
        return SimpleNamespace(path=Path("/q"), manifest=SimpleNamespace(quantization={"gate": "g"}))

    monkeypatch.setattr(runtime.export.quantize, "quantize_bundle", quantize_bundle)
    monkeypatch.setattr(runtime.export.quantize, "gate_summary", lambda q: f"gate {q}")
    assert main(["quantize", "/b", "--calibration", "/ds", "--out", "/q"]) == 0
    more = ["--max-error", "0.5", "--held-out", "0.5", "--calibration-frames", "64"]
    assert main(["quantize", "/b", "--calibration", "/ds", "--out", "/q", *more]) == 0
    assert calls == [
        (("/b", "/ds", "/q"), {"max_error": 0.2, "held_out_fraction": 0.25, "calibration_frames": 256}),
        (("/b", "/ds", "/q"), {"max_error": 0.5, "held_out_fraction": 0.5, "calibration_frames": 64}),
    ]
    assert capsys.readouterr().out == "/q\n  gate {'gate': 'g'}\n/q\n  gate {'gate': 'g'}\n"
    assert main(["quantize", "/b", "--calibration", "/ds", "--out", "/q", "--max-error", "0"]) == 0
    assert calls[-1][1]["max_error"] == 0.0


# --- check ---------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Engine:
    def __init__(self, clock: Clock, calls: list[Any]) -> None:
        self.clock, self.calls = clock, calls
        self.manifest = SimpleNamespace(policy_name="act", programs={"CPU": SimpleNamespace(precision="f32")})
        self.info = SimpleNamespace(
            device="CPU",
            precision="bf16",
            to_json=lambda: {
                "bundle": "not shown",
                "engine": "openvino",
                "device": "CPU",
                "precision": "bf16",
                "arithmetic": "bf16",
                "threads": 3,
                "cpus": [1, 2, 3],
            },
        )

    def infer(self, inputs: Any) -> None:
        self.calls.append(("infer", inputs))
        self.clock.now += 0.002 + 0.001 * (len(self.calls) % 2)  # 2 ms, then 3 ms, ...

    def close(self) -> None:
        self.calls.append("closed")


TEST_CASE = TestCaseEntry(
    file="test_case.npz",
    sha256="0" * 64,
    tolerance={"f32": 4e-5, "bf16": 0.05},
    basis={"bf16": ToleranceBasis("measured", reference_spread=2e-6, lowered_error=1e-5, lowered_by="openvino bf16")},
)


@pytest.fixture
def check(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The loader, the bundle, the clock and the process's memory stood in for; ``parity_ok`` and
    ``quantization`` set what the load reports."""
    seen = SimpleNamespace(calls=[], parity_ok=True, quantization={}, fail=None, units=None)
    clock = Clock()
    monkeypatch.setattr(runtime.commands.engine.time, "perf_counter", clock)

    def load_engine(config: EngineConfig, *, report: Any) -> Engine:
        seen.calls.append(("load", config))
        if seen.fail is not None:
            raise seen.fail
        parity = SimpleNamespace(
            ok=seen.parity_ok,
            to_json=lambda: {
                "ok": seen.parity_ok,
                "max_abs_err": 0.000123,
                "tolerance": 0.001,
                "runs": 16,
                **({} if seen.units is None else {"units": seen.units}),
            },
        )
        report.parity, report.engine_reason, report.skipped_devices = parity, "CPU: the only device", ("NPU",)
        report.timing_ms = {"ready": 1234.4}
        return Engine(clock, seen.calls)

    def resolve_bundle_path(config: EngineConfig) -> Path:
        seen.calls.append(("resolve", config.bundle))
        return Path("/bundles/act")

    class Bundle:
        @staticmethod
        def open(path: Path, *, verify_all: bool) -> SimpleNamespace:
            seen.calls.append(("open", path, verify_all))
            return SimpleNamespace(
                test_case=lambda: SimpleNamespace(inputs="case inputs"),
                manifest=SimpleNamespace(
                    programs={"CPU": SimpleNamespace(precision="f32")},
                    quantization=seen.quantization,
                    test_case=TEST_CASE,
                    source={"kind": "lerobot", "written_by": "0.6", "stack": {"torch": "2.11.0"}, "other": 1},
                ),
            )

    class Process:
        def memory_info(self) -> SimpleNamespace:
            return SimpleNamespace(rss=300 * 2**20 + 3 * 2**17)  # 300.375 MiB

    monkeypatch.setattr(runtime.engine.loader, "load_engine", load_engine)
    monkeypatch.setattr(runtime.export.demo, "resolve_bundle_path", resolve_bundle_path)
    monkeypatch.setattr(runtime.bundle.bundle, "Bundle", Bundle)
    monkeypatch.setattr(psutil, "Process", Process)
    monkeypatch.setattr(runtime.bench.stats, "summarize", lambda times: {"median": 2.5, "p90": 3.0, "times": times})
    monkeypatch.setattr(runtime.export.quantize, "gate_summary", lambda q: f"gate {q}")
    return seen


def test_check_loads_with_the_options_given_times_the_runs_and_reports_as_json(
    check: SimpleNamespace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    argv = [
        "/b",
        "--engine",
        "openvino",
        "--device",
        "cpu",
        "--precision",
        "bf16",
        "--cpus",
        "1-3",
        "--control-cpu",
        "4",
    ]
    assert main(["check", *argv, "--threads", "3", "--runs", "3", "--parity-runs", "4", "--json"]) == 0
    assert check.calls == [
        ("resolve", "/b"),
        ("open", Path("/bundles/act"), True),
        (
            "load",  # the bundle opened is the one loaded
            EngineConfig(
                bundle="/bundles/act",
                engine="openvino",
                devices=("CPU",),
                precision="bf16",
                cpus=(1, 2, 3),
                control_cpu=4,
                threads=3,
                parity_runs=4,
                allow_parity_failure=True,
                accept_lower_arithmetic=False,
            ),
        ),
        ("infer", "case inputs"),
        ("infer", "case inputs"),
        ("infer", "case inputs"),
        "closed",
    ]
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    report = json.loads(out)
    times = report["latency_ms"].pop("times")
    assert times == pytest.approx([2.0, 3.0, 2.0])
    assert report == {
        "ok": True,
        "bundle": "/bundles/act",
        "policy": "act",
        "engine": "openvino",
        "device": "CPU",
        "precision": "bf16",
        "arithmetic": "bf16",
        "threads": 3,
        "cpus": [1, 2, 3],
        "engine_reason": "CPU: the only device",
        "skipped_devices": ["NPU"],
        "parity": {"ok": True, "max_abs_err": 0.000123, "tolerance": 0.001, "runs": 16},
        "latency_ms": {"median": 2.5, "p90": 3.0, "runs": 3},
        "timing_ms": {"ready": 1234.4},
        "rss_mb": 300.4,
        "torch_imported": False,
        "program_precision": "f32",
        "quantization": {},
        "tolerance": {
            "precision": "bf16",
            "value": 0.05,
            "how": "measured",
            "basis": TEST_CASE.basis["bf16"].to_json(),
            "said": TEST_CASE.describe_tolerance("bf16"),
        },
        "source": {"kind": "lerobot", "written_by": "0.6", "stack": {"torch": "2.11.0"}},
    }


def test_check_runs_at_least_once_with_the_defaults(check: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--runs", "0", "--accept-lower-arithmetic", "--json"]) == 0
    assert check.calls[2] == (
        "load",
        EngineConfig(bundle="/bundles/act", parity_runs=16, allow_parity_failure=True, accept_lower_arithmetic=True),
    )
    assert [c for c in check.calls if c[0] == "infer"] == [("infer", "case inputs")]
    assert json.loads(capsys.readouterr().out)["latency_ms"]["runs"] == 1
    assert main(["check", "--json"]) == 0
    assert len([c for c in check.calls if c[0] == "infer"]) == 1 + 30


def test_check_prints_a_report_for_people(
    check: SimpleNamespace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    assert main(["check", "/b", "--runs", "2"]) == 0
    assert capsys.readouterr().out == (
        "/bundles/act: policy act on CPU via openvino (bf16: program f32, arithmetic bf16; 3 threads on CPUs "
        "[1, 2, 3])\n"
        "  parity: ok, max abs error 0.000123 in absolute units (tolerance 0.001, 16 replays)\n"
        f"  tolerance (bf16): {TEST_CASE.describe_tolerance('bf16')}\n"
        "  latency: median 2.50 ms, p90 3.00 ms over 2 runs\n"
        "  ready in 1234 ms; resident memory 300 MiB; torch imported: True\n"
    )


def test_check_of_an_int8_bundle_says_its_gate(check: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    check.quantization = {"gate": {"max_error": 0.1}}
    assert main(["check", "/b", "--runs", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "  program: int8; gate {'gate': {'max_error': 0.1}}"


def test_a_failed_parity_is_exit_1_unless_allowed(check: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    check.parity_ok = False
    assert main(["check", "/b", "--runs", "1"]) == 1
    assert "  parity: FAILED, max abs error 0.000123 in absolute units" in capsys.readouterr().out
    assert main(["check", "/b", "--runs", "1", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False
    assert main(["check", "/b", "--runs", "1", "--allow-parity-failure"]) == 0
    assert main(["check", "/b", "--runs", "1", "--allow-parity-failure", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["ok"] is True


def test_a_bundle_that_cannot_load_is_a_json_error_or_its_refusal(
    check: SimpleNamespace, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    check.fail = BundleError("/b: model.pte: sha256 mismatch")
    assert main(["check", "/b", "--json"]) == 2
    assert capsys.readouterr().out == (
        '{"ok": false, "error": "/b: model.pte: sha256 mismatch", "error_type": "BundleError"}\n'
    )
    assert _errors(caplog) == []
    assert main(["check", "/b"]) == 65
    assert _errors(caplog) == [("runtime.cli", "/b: model.pte: sha256 mismatch")]
    check.fail = ParityError("parity")
    assert main(["check", "/b", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error_type"] == "ParityError"


def test_the_parity_error_is_said_in_the_test_cases_units() -> None:
    assert runtime.commands.engine._units("absolute") == "absolute units"
    assert runtime.commands.engine._units("action std (normalised units)") == "units of action std (normalised units)"


# --- bench engine --------------------------------------------------------------------------------


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The benchmark stood in for: ``runs`` records what it is handed, ``result`` is what it returns."""
    runs: list[Any] = []
    result: dict[str, Any] = {
        "machine": {"cpu_flags": ["avx2", "amx_bf16"]},
        "rows": [
            {
                "name": "eager",
                "median_ms": 10.0,
                "p90_ms": 12.5,
                "speedup_vs_eager": 1.0,
                "error": 0.0,
                "precision": "f32",
                "error_units": "action std",
            },
            {
                "name": "openvino bf16",
                "median_ms": 2.125,
                "p90_ms": 2.5,
                "speedup_vs_eager": 4.7,
                "error": 0.0123,
                "precision": "bf16",
                "error_units": "the first row's units are the ones said",
            },
        ],
        "refused": {"executorch int8": "no INT8 kernels"},
        "cold_start": {
            "openvino": {
                "replays": 16,
                "replays_before_ready": 2,
                "parity_ok": True,
                "ms": {
                    "interpreter": 40.2,
                    "import": 150.4,
                    "open": 90.0,
                    "compile": 300.6,
                    "replays_before_ready": 200.0,
                    "warmup": 0.1,
                    "tokenizer": 0.0,
                    "ready": 781.3,
                    "replays_after_ready": 1400.0,
                    "first_chunk": 2281.5,
                },
                "rss_mb": 312.4,
                "process_wall_ms": 2600.6,
                "torch_imported": False,
            },
            "executorch whole gate": {"error": "exit 1"},
        },
    }

    def run(factory: str, **kw: Any) -> dict[str, Any]:
        runs.append((factory, kw))
        return result

    monkeypatch.setattr(runtime.bench.engine, "run_engine_bench", run)
    return SimpleNamespace(runs=runs, result=result)


def test_bench_engine_hands_over_every_option(bench: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "engine", "--json"]) == 0
    argv = [
        "--factory",
        "m.py:f",
        "--lerobot",
        "/c",
        "--vlm-dir",
        "/v",
        "--calibration",
        "/ds",
        "--precisions",
        " f32 ,int8,",
    ]
    more = ["--runs", "3", "--cpus", "1-2", "--control-cpu", "3", "--threads", "2", "--no-peer", "--bundles", "/k"]
    assert main(["bench", "engine", *argv, *more, "--one-at-a-time", "--json"]) == 0
    assert bench.runs == [
        (
            "runtime.policies.act:make_act_policy",
            {
                "lerobot": "",
                "vlm_dir": None,
                "calibration": "",
                "precisions": ("f32", "bf16", "int8"),
                "runs": 20,
                "cpus": (),
                "control_cpu": 0,
                "threads": 0,
                "peer": True,
                "bundles_dir": "",
                "one_at_a_time": False,
            },
        ),
        (
            "m.py:f",
            {
                "lerobot": "/c",
                "vlm_dir": "/v",
                "calibration": "/ds",
                "precisions": ("f32", "int8"),
                "runs": 3,
                "cpus": (1, 2),
                "control_cpu": 3,
                "threads": 2,
                "peer": False,
                "bundles_dir": "/k",
                "one_at_a_time": True,
            },
        ),
    ]
    out = capsys.readouterr().out
    assert out.startswith('{\n  "machine": {\n')
    assert json.loads(out.split("\n}\n")[0] + "\n}") == bench.result


@pytest.mark.parametrize("precisions", ["bf16,int8", "f32,fp8", "", "F32"])
def test_bench_engine_needs_f32_and_known_precisions(
    precisions: str, bench: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    assert main(["bench", "engine", "--precisions", precisions]) == 78
    assert bench.runs == []
    assert _errors(caplog) == [
        ("runtime.cli", f"--precisions: expected f32 plus any of bf16, int8, got {precisions!r}")
    ]


def test_bench_engine_prints_a_row_per_engine_the_refusals_and_cold_starts(
    bench: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "engine", "--precisions", "f32"]) == 0
    assert capsys.readouterr().out == (
        "CPU flags: avx2 amx_bf16\n"
        "eager                    median    10.00 ms  p90    12.50 ms  x1.00 vs eager  error 0 (f32)\n"
        "openvino bf16            median     2.12 ms  p90     2.50 ms  x4.70 vs eager  error 0.012 (bf16)\n"
        "executorch int8          refused: no INT8 kernels\n"
        "errors in units of action std\n"
        "cold start (openvino, fresh process): ready in 781 ms (interpreter 40, imports 150, bundle open 90, "
        "compile 301, 2 replays 200, warm-up 0); first chunk at 2282 ms (14 replays after ready 1400); parity ok; "
        "312 MiB; torch imported: False\n"
        "cold start (executorch whole gate, fresh process): failed: exit 1\n"
    )
    bench.result["machine"]["cpu_flags"] = []
    assert main(["bench", "engine"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "CPU flags: none of AVX2/AVX-512/VNNI/BF16/AMX"


def test_check_says_the_parity_error_in_the_units_the_test_case_names(
    check: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    check.units = "action std (normalised units)"
    assert main(["check", "/b", "--runs", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "  parity: ok, max abs error 0.000123 in units of action std (normalised units) (tolerance 0.001, 16 replays)"
    )
    check.units = "absolute"
    assert main(["check", "/b", "--runs", "1"]) == 0
    assert "max abs error 0.000123 in absolute units (" in capsys.readouterr().out
