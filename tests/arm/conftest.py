"""Fixtures for the arm process tests: a short temporary directory (Unix socket paths are short) and
a synthetic camera publishing over ZeroMQ, as in the control tests."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control.conftest import Camera


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lrt-a-") as d:
        yield Path(d)


@pytest.fixture
def camera(short_dir: Path) -> Iterator[Camera]:
    cam = Camera(f"ipc://{short_dir}/cam.sock")
    yield cam
    cam.close()
