"""INT8: a LeRobot ACT bundle quantised on recorded observations, its accuracy gate, and check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from runtime.errors import ExportError, ParityError
from runtime.export.lerobot import lerobot_available

REASON = lerobot_available()
pytestmark = [pytest.mark.export, pytest.mark.skipif(REASON is not None, reason=f"needs LeRobot: {REASON}")]


def _record(directory: Path, n: int, seed: int = 0) -> Path:
    """Observations as a recorder writes them: one .npz each, arrays named as the bundle's inputs."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        np.savez(
            directory / f"obs_{i:04d}.npz",
            **{
                "observation.images.front": rng.integers(0, 256, (96, 128, 3), dtype=np.uint8),
                "observation.state": (rng.normal(size=6) * 30).astype(np.float32),
            },
        )
    return directory


@pytest.fixture(scope="session")
def int8_bundle(act_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.export.quantize import quantize_bundle

    calib = _record(tmp_path_factory.mktemp("recorded"), 16)
    out = tmp_path_factory.mktemp("bundles") / "act_int8"
    # A random-weight policy on noise images is a hard case for INT8; the bound here is generous on
    # purpose, the refusal test below shows the gate biting.
    quantize_bundle(act_bundle, calib, out, max_error=5.0)
    return out


def test_int8_bundle_records_its_gate_and_check_reports_it(
    int8_bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.cli import main

    m = json.loads((int8_bundle / "manifest.json").read_text())
    assert m["programs"]["CPU"]["precision"] == "int8"
    gate = m["quantization"]["gate"]
    assert gate["ok"] and gate["held_out_observations"] == 5  # 4 held out + the test case
    assert 0 < gate["max_error"] <= 5.0 and "action std" in gate["units"]
    assert m["quantization"]["calibration_observations"] == 12
    assert m["test_case"]["tolerance"]["int8"] == 5.0
    before = os.sched_getaffinity(0)
    status = main(["check", str(int8_bundle), "--runs", "2", "--json"])
    os.sched_setaffinity(0, before)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status == 0 and result["parity"]["ok"]
    assert result["program_precision"] == "int8"
    assert result["parity"]["tolerance"] == 5.0  # held to the gate's bound, not the f32 tolerance
    assert result["quantization"]["gate"]["max_error"] == gate["max_error"]


def test_gate_refuses_naming_the_error(act_bundle: Path, int8_bundle: Path) -> None:
    from runtime.bundle.bundle import Bundle
    from runtime.export.quantize import accuracy_gate, load_observations

    src = Bundle.open(act_bundle)
    held = load_observations(_record(int8_bundle.parent / "held", 4, seed=7), src.manifest)
    case = src.test_case()
    with pytest.raises(ParityError) as err:
        accuracy_gate(src, int8_bundle, "program_cpu.pte", held, case.scale["action"], case.scale_source, 1e-4)
    text = str(err.value)
    assert "INT8 refused: on 4 held-out observations" in text
    assert "in units of action std" in text and "the bound is 0.0001" in text


def test_calibration_source_is_checked(act_bundle: Path, tmp_path: Path) -> None:
    from runtime.bundle.bundle import Bundle
    from runtime.export.quantize import load_observations

    m = Bundle.open(act_bundle).manifest
    with pytest.raises(ExportError, match=r"holds 2 \.npz observation"):
        load_observations(_record(tmp_path / "few", 2), m)
    bad = _record(tmp_path / "bad", 4)
    np.savez(bad / "obs_0001.npz", **{"observation.images.front": np.zeros((96, 128, 3), np.uint8)})
    with pytest.raises(ExportError) as err:
        load_observations(bad, m)
    assert "obs_0001.npz" in str(err.value) and "observation.state" in str(err.value)


def test_int8_chunk_matches_lerobot_within_its_gate_bound(act_checkpoint: Path, int8_bundle: Path) -> None:
    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import load_engine
    from tests.engine.test_lerobot import _observation, lerobot_chunk

    before = os.sched_getaffinity(0)
    engine = load_engine(EngineConfig(bundle=str(int8_bundle), engine="executorch", warmup_runs=0))
    os.sched_setaffinity(0, before)
    m = json.loads((int8_bundle / "manifest.json").read_text())
    scale = np.asarray(m["test_case"]["scale"]["action"])
    try:
        for seed in (1, 2):
            obs = _observation(seed)
            err = np.abs(engine.infer(obs)["action"] - lerobot_chunk(act_checkpoint, obs)) / scale
            assert err.max() <= m["test_case"]["tolerance"]["int8"], f"normalised error {err.max():.3g}"
            assert err.max() > 2e-5  # INT8 really runs: an f32 program stays under 2e-5
    finally:
        engine.close()
