"""Checkpoints written by LeRobot 0.6 (its own classes, weights at a trained model's scale), exported and served.

The checkpoints are written in the 0.6 stack's own Python (``make lerobot-stacks``), exported with one
``export --lerobot`` command here (which traces them in that Python: runtime.export.lerobot.stacks),
and the served chunk is compared with what LeRobot 0.6 itself computes (``predict_action_chunk`` in
that Python, same observation, task and noise), held to the bundle's own tolerance, measured at export.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.export.lerobot import lerobot_available
from tests.engine.lerobot_release import lerobot_chunks, run_in, stack_of

REASON = lerobot_available()
pytestmark = [pytest.mark.export, pytest.mark.skipif(REASON is not None, reason=f"needs LeRobot: {REASON}")]

JOINTS = ("shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos", "gripper.pos")
IMAGE, STATE = "observation.images.front", "observation.state"
TASKS = ("Pick up the red cube and place it in the box.", "Fold the cloth.", "Nimm den Würfel ☕")


@pytest.fixture(scope="module")
def stack06() -> Any:
    return stack_of("0.6")


def _export(checkpoint: Path, out: Path, *extra: str) -> int:
    from runtime.cli import main

    before = os.sched_getaffinity(0)
    try:
        return main(
            ["export", "--lerobot", str(checkpoint), "--out", str(out), "--action-names", ",".join(JOINTS), *extra]
        )
    finally:
        os.sched_setaffinity(0, before)


@pytest.fixture(scope="module")
def act06(stack06: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lerobot06") / "act"
    run_in(stack06, "runtime.policies.lerobot_checkpoints", str(out), "act", "tiny")
    return out


@pytest.fixture(scope="module")
def act06_bundle(act06: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles06") / "act"
    assert _export(act06, out) == 0
    return out


@pytest.fixture(scope="module")
def smolvla06(stack06: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lerobot06") / "smolvla"
    run_in(stack06, "runtime.policies.smolvla_checkpoint", str(out), "tiny")
    return out


@pytest.fixture(scope="module")
def smolvla06_bundle(smolvla06: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles06") / "smolvla"
    assert _export(smolvla06, out) == 0
    return out


def _observation(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        IMAGE: rng.integers(0, 256, (96, 128, 3), dtype=np.uint8),
        STATE: (rng.normal(size=6) * 30).astype(np.float32),
    }


def _engine(bundle: Path) -> Any:
    from tests.engine.arithmetic import load_on_this_cpu

    loaded, report = load_on_this_cpu(bundle, "openvino")
    assert report.parity.ok
    return loaded


def _tolerance(loaded: Any) -> float:
    from runtime.engine.parity import case_tolerance

    return case_tolerance(loaded, loaded.test_case)


def test_a_0_6_checkpoint_says_so_and_its_config_is_what_0_6_writes(act06: Path, act06_bundle: Path) -> None:
    assert "pretrained_revision" in json.loads((act06 / "config.json").read_text())
    source = json.loads((act06_bundle / "manifest.json").read_text())["source"]
    assert source["written_by"] == "0.6"
    assert source["stack"]["lerobot"].startswith("0.6.") and source["stack"]["torch"].startswith("2.11")
    basis = json.loads((act06_bundle / "manifest.json").read_text())["test_case"]["tolerance_basis"]["f32"]
    assert basis["how"] == "measured" and basis["traced_by"].startswith("lerobot 0.6.")
    assert 0 < basis["reference_spread"] < 1e-4 and 0 < basis["lowered_error"] < 1e-4


def test_a_0_6_act_serves_the_chunk_lerobot_0_6_computes(
    stack06: Any, act06: Path, act06_bundle: Path, tmp_path: Path
) -> None:
    from tests.engine.arithmetic import action_scale

    observations = [_observation(seed) for seed in (11, 12)]
    want = lerobot_chunks(stack06, act06, observations, tmp_path)
    loaded = _engine(act06_bundle)
    try:
        scale = action_scale(act06_bundle)
        for obs, ref in zip(observations, want, strict=True):
            got = loaded.infer(obs)["action"]
            assert got.shape == ref.shape == (20, 6)
            error = float((np.abs(got - ref) / scale).max())
            assert error <= _tolerance(loaded), f"normalised error {error:.3g}"
            assert np.abs(ref).max() > 5  # actions of real magnitude (degrees)
    finally:
        loaded.close()


def test_a_0_6_smolvla_serves_the_chunk_lerobot_0_6_computes_with_its_task_and_noise(
    stack06: Any, smolvla06: Path, smolvla06_bundle: Path, tmp_path: Path
) -> None:
    from runtime.bundle.bundle import Bundle
    from runtime.bundle.tokenizer import TaskTokenizer
    from tests.engine.arithmetic import action_scale

    bundle = Bundle.open(smolvla06_bundle)
    lang = bundle.manifest.language
    assert lang is not None and bundle.manifest.source["stack"]["transformers"].startswith("5.")
    tokenizer = TaskTokenizer(bundle.tokenizer_file(), max_length=lang.max_length, append_newline=lang.append_newline)
    rng = np.random.default_rng(5)
    noises = [rng.standard_normal((10, 32), dtype=np.float32) for _ in TASKS]
    observations = [_observation(20 + k) for k in range(len(TASKS))]
    want = lerobot_chunks(stack06, smolvla06, observations, tmp_path, tasks=list(TASKS), noises=noises)
    loaded = _engine(smolvla06_bundle)
    try:
        scale = action_scale(smolvla06_bundle)
        for obs, task, noise, ref in zip(observations, TASKS, noises, want, strict=True):
            got = loaded.run_validated([obs[IMAGE], obs[STATE], *tokenizer.encode(task), noise])["action"]
            error = float((np.abs(got - ref[: got.shape[0]]) / scale).max())
            assert error <= _tolerance(loaded), f"{task!r}: normalised error {error:.3g}"
    finally:
        loaded.close()


@pytest.fixture(scope="module")
def smolvla06_rtc(stack06: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 0.6 SmolVLA with real-time chunking enabled in its config (horizon 6, guidance cap 8)."""
    out = tmp_path_factory.mktemp("lerobot06") / "smolvla_rtc"
    run_in(stack06, "runtime.policies.smolvla_checkpoint", str(out), "tiny", "front", "rtc")
    return out


def test_a_0_6_smolvla_with_rtc_serves_the_chunk_lerobot_0_6s_rtc_path_computes(
    stack06: Any, smolvla06_rtc: Path, tmp_path: Path
) -> None:
    from runtime.bundle.bundle import Bundle
    from runtime.bundle.rtc import prefix_weights
    from runtime.bundle.tokenizer import TaskTokenizer
    from tests.engine.arithmetic import action_scale

    assert _export(smolvla06_rtc, tmp_path / "b") == 0
    bundle = Bundle.open(tmp_path / "b")
    rtc, lang = bundle.manifest.rtc, bundle.manifest.language
    assert rtc is not None and lang is not None and (rtc.execution_horizon, rtc.max_guidance_weight) == (6, 8.0)
    tokenizer = TaskTokenizer(bundle.tokenizer_file(), max_length=lang.max_length, append_newline=lang.append_newline)
    ids, mask = tokenizer.encode(TASKS[0])
    rng = np.random.default_rng(9)
    noise = rng.standard_normal((10, 32), dtype=np.float32)
    obs = _observation(40)
    loaded = _engine(tmp_path / "b")
    try:
        chunk, dim, delay, steps = 10, 6, 2, 6
        zeros = [np.zeros((chunk, dim), np.float32), np.zeros(chunk, np.float32), np.array([8.0], np.float32)]
        plain = loaded.run_validated([obs[IMAGE], obs[STATE], ids, mask, noise, *zeros])["action"]
        leftover = np.ascontiguousarray(np.concatenate([plain, plain])[:steps] + 0.5, dtype=np.float32)
        prefix = np.zeros((chunk, dim), np.float32)
        prefix[:steps] = leftover
        weights = prefix_weights(delay, rtc.execution_horizon, chunk, rtc.prefix_attention_schedule, steps)
        got = loaded.run_validated([obs[IMAGE], obs[STATE], ids, mask, noise, prefix, weights, zeros[2]])["action"]
    finally:
        loaded.close()
    (want,) = lerobot_chunks(
        stack06,
        smolvla06_rtc,
        [obs],
        tmp_path / "ref",
        tasks=[TASKS[0]],
        noises=[noise],
        leftovers=[leftover],
        rtc={"delay": delay, "horizon": rtc.execution_horizon},
    )
    scale = action_scale(tmp_path / "b")
    error = float((np.abs(got - want[: got.shape[0]]) / scale).max())
    assert error <= float(bundle.manifest.test_case.tolerance["f32"]), f"normalised error {error:.3g}"
    assert float((np.abs(got - plain) / scale).max()) > 1e-3  # the guidance moved the chunk


def test_a_0_6_checkpoint_is_never_traced_by_another_release(
    act06: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _export(act06, tmp_path / "b", "--lerobot-python", sys.executable) != 0
    said = capsys.readouterr().err
    assert f"--lerobot-python: {sys.executable} has LeRobot 0.4.4; the checkpoint was written by LeRobot 0.6.x" in said
    assert not (tmp_path / "b").exists()
