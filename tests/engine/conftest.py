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
