"""Fixtures for the daemon's side of arm control: the control tests' calibration, manifest and
simulated arm, a short temporary directory (Unix socket paths are short) and a synthetic camera
publishing over ZeroMQ."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control.conftest import Camera, calibration, manifest, sim_arm

__all__ = ["calibration", "manifest", "sim_arm"]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lrt-ac-") as d:
        yield Path(d)


@pytest.fixture
def camera(short_dir: Path) -> Iterator[Camera]:
    cam = Camera(f"ipc://{short_dir}/cam.sock")
    yield cam
    cam.close()
