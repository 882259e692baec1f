"""``lerobot-runtime serve`` end to end: real bundle, simulated arm, systemd notify, ZeroMQ client."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from runtime.bundle.bundle import Bundle
from runtime.client import PolicyClient

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lrt-e2e-") as d:  # ipc paths must stay short
        yield Path(d)


def _config(directory: Path, bundle: Path, arm: str) -> Path:
    path = directory / "lerobot-runtime.toml"
    path.write_text(
        f"""
[engine]
bundle = "{bundle}"
[server]
endpoints = ["ipc://{directory}/policy.sock"]
{arm}
[daemon]
tick_s = 0.05
arm_poll_s = 0.1
stats_log_interval_s = 0.3
arm_wait_s = 1.0
"""
    )
    return path


def _serve(config: Path, notify: str) -> subprocess.Popen[str]:
    env = {**os.environ, "NOTIFY_SOCKET": notify}
    env.pop("WATCHDOG_USEC", None)
    return subprocess.Popen(
        [sys.executable, "-m", "runtime", "serve", "--config", str(config)],
        cwd="/",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_serve_with_the_sim_arm(demo_bundle: Path, short_dir: Path) -> None:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(short_dir / "notify"))
    notify.settimeout(120)
    config = _config(short_dir, demo_bundle, '[arm]\nkind = "sim"')
    proc = _serve(config, str(short_dir / "notify"))
    case = Bundle.open(demo_bundle).test_case()
    try:
        heard: list[bytes] = []
        while not heard or b"READY=1" not in heard[-1]:
            heard.append(notify.recv(4096))
        ready = heard[-1]
        # READY=1 only once the arm is connected: systemd heard the arm being connected first
        assert any(b"STATUS=connecting the arm" in m for m in heard[:-1]), heard
        assert b"serving demo_act_residual on CPU/f32" in ready and b"arm sim" in ready
        with PolicyClient(f"ipc://{short_dir}/policy.sock", timeout_s=10) as client:
            chunk = client.infer(case.inputs)
            np.testing.assert_allclose(chunk.actions, case.outputs["action"], atol=2e-5)
        status = b""
        while b"; arm ok" not in status:  # the periodic stats line reaches systemd's STATUS too
            status = notify.recv(4096)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        notify.close()
    assert proc.returncode == 0, out
    assert "parity ok" in out
    assert "arm connected: so101 sim" in out
    assert "; arm ok" in out  # periodic stats line with the arm's health
    assert "arm disconnected" in out
    # the shutdown order: motion is stopped (and the arm process releases its port) while the server
    # still answers; then intake stops
    assert out.index("arm disconnected") < out.index("final stats")
    assert out.index("control: shut down") < out.index("final stats")


def _drain(sock: socket.socket) -> list[bytes]:
    sock.setblocking(False)
    heard: list[bytes] = []
    while True:
        try:
            heard.append(sock.recv(4096))
        except BlockingIOError:
            return heard


def test_unreachable_arm_fails_startup_with_a_clear_error(demo_bundle: Path, short_dir: Path) -> None:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(short_dir / "notify"))
    config = _config(short_dir, demo_bundle, f'[arm]\nkind = "feetech"\nport = "{short_dir}/ttyACM9"')
    proc = _serve(config, str(short_dir / "notify"))
    try:
        out, _ = proc.communicate(timeout=120)
        heard = _drain(notify)
    finally:
        notify.close()
    assert proc.returncode != 0
    assert f"{short_dir}/ttyACM9" in out and "after waiting 1 s (daemon.arm_wait_s)" in out
    # systemd is the one that must not hear READY=1; it did hear the daemon try, and stop
    assert any(b"STATUS=connecting the arm" in m for m in heard), heard
    assert not any(b"READY=1" in m for m in heard), heard
    assert heard[-1].startswith(b"STOPPING=1")


def test_bad_config_value_names_the_key(demo_bundle: Path, short_dir: Path) -> None:
    config = _config(short_dir, demo_bundle, '[arm]\nkind = "sim"\nretries = 99')
    proc = _serve(config, str(short_dir / "notify-unused"))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 78  # EX_CONFIG: the unit's RestartPreventExitStatus=
    assert "arm: retries must be within 0..20, got 99" in out
