"""Fixtures for the daemon's side of arm control: the control tests' calibration, manifest, simulated
arm, short temporary directory (Unix socket paths are short) and synthetic camera publishing over
ZeroMQ, taken from tests/control/conftest.py."""

from tests.control.conftest import calibration, camera, manifest, short_dir, sim_arm

__all__ = ["calibration", "camera", "manifest", "short_dir", "sim_arm"]
