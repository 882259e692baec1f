"""Fixtures for the arm process tests: the control tests' short temporary directory (Unix socket paths
are short) and synthetic camera publishing over ZeroMQ, taken from tests/control/conftest.py."""

from tests.control.conftest import camera, short_dir

__all__ = ["camera", "short_dir"]
