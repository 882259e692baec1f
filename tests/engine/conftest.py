"""LeRobot checkpoints and the bundles exported from them, made once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

JOINTS = ("shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos", "gripper.pos")


@pytest.fixture(scope="session")
def act_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.policies.lerobot_checkpoints import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("lerobot") / "act", "act", "tiny")


@pytest.fixture(scope="session")
def act_bundle(act_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.cli import main

    out = tmp_path_factory.mktemp("bundles") / "act"
    before = os.sched_getaffinity(0)
    status = main(["export", "--lerobot", str(act_checkpoint), "--out", str(out), "--action-names", ",".join(JOINTS)])
    os.sched_setaffinity(0, before)
    assert status == 0
    return out


def _export(checkpoint: Path, out: Path) -> Path:
    from runtime.cli import main

    before = os.sched_getaffinity(0)
    status = main(["export", "--lerobot", str(checkpoint), "--out", str(out), "--action-names", ",".join(JOINTS)])
    os.sched_setaffinity(0, before)
    assert status == 0
    return out


@pytest.fixture(scope="session")
def tdmpc_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.policies.lerobot_checkpoints import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("lerobot") / "tdmpc", "tdmpc", "tiny")


@pytest.fixture(scope="session")
def tdmpc_bundle(tdmpc_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(tdmpc_checkpoint, tmp_path_factory.mktemp("bundles") / "tdmpc")


@pytest.fixture(scope="session")
def vqbet_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.policies.lerobot_checkpoints import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("lerobot") / "vqbet", "vqbet", "tiny")


@pytest.fixture(scope="session")
def vqbet_bundle(vqbet_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(vqbet_checkpoint, tmp_path_factory.mktemp("bundles") / "vqbet")


# SmolVLA's VLM as a hub id: a checkpoint trained from SmolVLM2 names it so, and the export must resolve
# it offline (--vlm-dir), never download it
SMOLVLA_HUB_VLM = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"


@pytest.fixture(scope="session")
def smolvla_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny SmolVLA (LeRobot's classes, random weights) whose config names its VLM by hub id; the VLM
    directory it was built from (config, processor, trained tokenizer) is ``<checkpoint>.vlm``."""
    import json

    from runtime.policies.smolvla_checkpoint import write_smolvla

    path = write_smolvla(tmp_path_factory.mktemp("lerobot") / "smolvla", "tiny")
    cfg = json.loads((path / "config.json").read_text())
    cfg["vlm_model_name"] = SMOLVLA_HUB_VLM
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


@pytest.fixture(scope="session")
def smolvla_vlm(smolvla_checkpoint: Path) -> Path:
    return smolvla_checkpoint.parent / f"{smolvla_checkpoint.name}.vlm"


@pytest.fixture(scope="session")
def smolvla_bundle(smolvla_checkpoint: Path, smolvla_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.cli import main

    out = tmp_path_factory.mktemp("bundles") / "smolvla"
    before = os.sched_getaffinity(0)
    args = ["export", "--lerobot", str(smolvla_checkpoint), "--vlm-dir", str(smolvla_vlm), "--out", str(out)]
    status = main([*args, "--action-names", ",".join(JOINTS)])
    os.sched_setaffinity(0, before)
    assert status == 0
    return out


# LeRobot's RTC settings the RTC checkpoint carries: a horizon short of its 10-step chunk and a cap
# other than LeRobot's default, so the tests see them come from the checkpoint
SMOLVLA_RTC = {"execution_horizon": 6, "max_guidance_weight": 8.0}


@pytest.fixture(scope="session")
def smolvla_rtc_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny SmolVLA (the same random weights as ``smolvla_checkpoint``) with real-time chunking
    enabled in its config; its VLM directory is ``<checkpoint>.vlm``, named in the config."""
    from runtime.policies.smolvla_checkpoint import write_smolvla

    return write_smolvla(tmp_path_factory.mktemp("lerobot") / "smolvla_rtc", "tiny", rtc=SMOLVLA_RTC)


@pytest.fixture(scope="session")
def smolvla_rtc_bundle(smolvla_rtc_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(smolvla_rtc_checkpoint, tmp_path_factory.mktemp("bundles") / "smolvla_rtc")
