"""The export / lower / check / bench engine commands, end to end on a tiny real model."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.bundle.bundle import sha256_file
from runtime.bundle.manifest import read_manifest
from runtime.cli import main
from runtime.engine.devices import present_devices

ROOT = Path(__file__).resolve().parents[2]
TINY = f"{ROOT / 'examples' / 'tiny_policy.py'}:make_tiny_policy"

pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "bundle"
    assert (
        main(
            [
                "export",
                "--factory",
                TINY,
                "--out",
                str(out),
                "--name",
                "tiny",
                "--action-names",
                "a,b,c,d,e,f",
                "--control-rate-hz",
                "50",
            ]
        )
        == 0
    )
    return out


def _check(*args: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "check", *args, "--json", "--runs", "3"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_export_writes_a_complete_bundle(tiny_bundle: Path) -> None:
    m = read_manifest(tiny_bundle)
    assert m.policy_name == "tiny"
    assert [(i.name, i.dtype, i.shape, i.role) for i in m.inputs] == [
        ("observation.images.front", "uint8", (32, 32, 3), "image"),
        ("observation.state", "float32", (6,), "state"),
    ]
    assert m.chunk_length == 10 and m.action_names == ("a", "b", "c", "d", "e", "f")
    assert m.control_rate_hz == 50.0
    assert m.programs["CPU"].delegation == "full" and m.programs["CPU"].precision == "f32"
    assert m.portable_program is not None and (tiny_bundle / m.portable_program.file).is_file()
    assert {"torch", "executorch", "openvino", "lerobot_runtime"} <= set(m.tools)


def test_check_json_reports_what_runs(tiny_bundle: Path) -> None:
    code, result = _check(str(tiny_bundle), "--engine", "openvino", "--precision", "f32")
    assert code == 0
    for key in ("engine", "device", "precision", "threads", "parity", "latency_ms", "torch_imported", "rss_mb"):
        assert key in result
    assert result["engine"] == "openvino" and result["device"] == "CPU" and result["precision"] == "f32"
    parity = result["parity"]
    assert isinstance(parity, dict) and parity["ok"] is True and parity["max_abs_err"] <= parity["tolerance"]
    latency = result["latency_ms"]
    assert isinstance(latency, dict) and 0 < latency["median"] <= latency["p90"]
    assert result["torch_imported"] is False


def test_check_exits_non_zero_when_the_bundle_cannot_serve(tiny_bundle: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bundle, broken)
    (broken / "program_cpu.pte").write_bytes(b"damaged")
    code, result = _check(str(broken))
    assert code == 2 and result["ok"] is False
    assert "sha256" in str(result["error"])
    missing = next((d for d in ("NPU", "GPU") if d not in present_devices()), None)
    if missing:
        code, result = _check(str(tiny_bundle), "--device", missing)
        assert code == 2 and "not present" in str(result["error"])


def test_lower_adds_a_program_from_the_portable_export(tiny_bundle: Path, tmp_path: Path) -> None:
    copy = tmp_path / "b"
    shutil.copytree(tiny_bundle, copy)
    # a bundle carried to another machine: the program is re-made there from model.pt2
    assert main(["lower", str(copy), "--device", "CPU", "--precision", "bf16"]) == 0
    m = read_manifest(copy)
    assert m.programs["CPU"].precision == "bf16"
    assert m.programs["CPU"].sha256 == sha256_file(copy / m.programs["CPU"].file)
    code, result = _check(str(copy))
    assert code == 0 and isinstance(result["parity"], dict) and result["parity"]["ok"]
    # the program carries bf16 whatever the CPU: check reports it, and the arithmetic the CPU ran
    assert result["precision"] == "bf16" and result["program_precision"] == "bf16"
    assert result["arithmetic"] in ("f32", "bf16")


def test_export_for_an_absent_device_names_the_present_ones(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = next((d for d in ("NPU", "GPU") if d not in present_devices()), None)
    if missing is None:
        pytest.skip("both GPU and NPU are present")
    assert main(["export", "--factory", TINY, "--out", str(tmp_path / "x"), "--device", missing]) == 2
    assert f"OpenVINO does not see a {missing} on this machine (it sees: CPU" in caplog.text
    assert main(["lower", str(tmp_path / "nope"), "--device", "CPU"]) == 65  # EX_DATAERR: a bundle problem


def test_bad_factory_spec(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert main(["export", "--factory", "no_colon", "--out", str(tmp_path)]) == 2
    assert "expected FILE.py:FUNC or module:FUNC" in caplog.text
    assert main(["export", "--factory", f"{ROOT / 'examples' / 'tiny_policy.py'}:nope", "--out", str(tmp_path)]) == 2
    assert "has no function 'nope'" in caplog.text


@pytest.mark.timeout(1200)  # three exports and a quantisation: minutes on a loaded 2-core machine
def test_bench_engine_prints_ratios_for_each_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "engine", "--factory", TINY, "--runs", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in result["rows"]}
    assert result["refused"] == {}  # every engine loaded every bundle
    assert list(rows) == [
        "eager_pytorch_f32",
        "openvino_f32",
        "executorch_f32",
        "openvino_bf16",
        "executorch_bf16",
        "openvino_int8",
        "executorch_int8",
        "peer_openvino_nncf_int8",
    ]
    for row in rows.values():
        assert row["median_ms"] > 0 and row["speedup_vs_eager"] > 0
        assert row["error_units"].startswith("max(1, peak")
    assert rows["openvino_f32"]["error"] < 2e-5  # f32 engine matches eager
    assert rows["openvino_int8"]["precision"].startswith("int8")
    assert 0 < rows["openvino_int8"]["error"] < 1  # quantised: not exact, not garbage
    assert 0 < rows["peer_openvino_nncf_int8"]["error"] < 1  # the peer quantised the same model
    # an INT8 program's float layers run at the CPU's fastest precision, on both engines alike
    assert rows["openvino_int8"]["precision"] == rows["executorch_int8"]["precision"]
    assert result["int8"]["calibration"].startswith("synthetic")
    assert result["machine"]["cpu_flags"]  # the flags that explain the numbers
    cold = result["cold_start"]
    assert list(cold) == ["openvino whole gate", "openvino", "executorch whole gate", "executorch"]
    assert cold["openvino"]["torch_imported"] is False and cold["executorch"]["torch_imported"] is True
    for name, row in cold.items():
        staged = not name.endswith("whole gate")
        ms = row["ms"]
        assert row["parity_ok"] and row["staged"] is staged and row["rss_mb"] > 0, name
        assert row["replays_before_ready"] == (2 if staged else 16), name
        assert 0 < ms["ready"] <= ms["first_chunk"] < row["process_wall_ms"], name
        # a staged start runs the other 14 replays after ready, a whole one none
        assert (ms["replays_after_ready"] > 0.1) is staged, name
        assert ms["ready"] >= ms["interpreter"] + ms["import"] + ms["open"] + ms["compile"], name


@pytest.mark.timeout(600)
def test_bench_engine_reuses_the_bundles_a_previous_run_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """``--bundles DIR``: the first run builds into DIR, the next one times the same programs unbuilt."""
    kept = tmp_path / "kept"
    args = ["bench", "engine", "--factory", TINY, "--precisions", "f32", "--runs", "2", "--no-peer", "--json"]
    assert main([*args, "--bundles", str(kept)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["reused"] == [] and (kept / "f32" / "manifest.json").is_file()
    program = next((kept / "f32").glob("*.pte"))
    built = program.stat().st_mtime_ns
    assert main([*args, "--bundles", str(kept)]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["reused"] == ["f32"] and program.stat().st_mtime_ns == built
    assert {r["name"] for r in second["rows"]} == {"eager_pytorch_f32", "openvino_f32", "executorch_f32"}
    assert next(r for r in second["rows"] if r["name"] == "openvino_f32")["error"] < 2e-5
    # a bundle of another precision where bf16 is expected is refused by name, not timed as bf16
    shutil.copytree(kept / "f32", kept / "bf16")
    with_bf16 = ["f32,bf16" if a == "f32" else a for a in args]
    assert main([*with_bf16, "--bundles", str(kept)]) == 65
    assert f"{kept / 'bf16'}: expected the bench's bf16 bundle, got a f32 one" in caplog.text
    # an altered program is refused, not timed
    data = program.read_bytes()
    program.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert main([*args, "--bundles", str(kept)]) == 65
    assert "sha256" in caplog.text


@pytest.mark.timeout(600)
def test_bench_engine_one_at_a_time_never_holds_two_precisions_engines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--one-at-a-time``: each precision's two engines are closed before the next precision's open,
    and every row is still timed against eager in the same group."""
    import runtime.engine.loader as loader

    real_load = loader.load_engine
    open_now: list[str] = []
    most: list[int] = [0]

    def counting_load(config, **kwargs):  # type: ignore[no-untyped-def]
        engine = real_load(config, **kwargs)
        real_close = engine.close
        open_now.append(config.bundle)
        most[0] = max(most[0], len(open_now))

        def close() -> None:
            if config.bundle in open_now:
                open_now.remove(config.bundle)
            real_close()

        engine.close = close  # type: ignore[method-assign]
        return engine

    monkeypatch.setattr(loader, "load_engine", counting_load)
    args = ["bench", "engine", "--factory", TINY, "--precisions", "f32,bf16", "--runs", "2", "--no-peer"]
    assert main([*args, "--bundles", str(tmp_path), "--one-at-a-time", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert most[0] == 2 and open_now == []  # one precision's openvino + executorch engines, then none
    assert result["engines_held"] == "one precision at a time"
    rows = {r["name"]: r for r in result["rows"]}
    assert list(rows) == ["eager_pytorch_f32", "openvino_f32", "executorch_f32", "openvino_bf16", "executorch_bf16"]
    assert rows["openvino_f32"]["error"] < 2e-5
    for row in rows.values():
        assert row["speedup_vs_eager"] == pytest.approx(row["eager_median_ms"] / row["median_ms"])
    # all at once (the default) holds all four
    most[0] = 0
    assert main([*args, "--bundles", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engines_held"] == "all at once" and most[0] == 4


def test_executorch_engine_without_torch_says_what_to_install(tiny_bundle: Path) -> None:
    """The robot-side install has no torch: asking for the executorch engine names the extra to install."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['executorch'] = None\n"
        "from runtime.cli import main\n"
        f"sys.exit(main(['check', {str(tiny_bundle)!r}, '--engine', 'executorch', '--json']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["error_type"] == "MissingDependencyError"
    assert "pip install 'lerobot-runtime[executorch]'" in result["error"]
    status, _ = _check(str(tiny_bundle), "--engine", "auto")  # the direct engine still serves
    assert status == 0


def test_check_says_the_parity_error_in_the_test_cases_units_once(demo_bundle: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "check", str(demo_bundle), "--runs", "3"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    parity = next(line for line in proc.stdout.splitlines() if line.strip().startswith("parity:"))
    assert re.fullmatch(
        r"  parity: ok, max abs error \S+ in units of max\(1, peak \|reference\| per joint\) "
        r"\(tolerance \S+, \d+ replays\)",
        parity,
    ), parity
