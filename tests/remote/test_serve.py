"""The two-machine set-up as the docs give it, on this machine: ``lerobot-runtime serve`` twice from TOML
files, the policy side with the demo bundle and CURVE on a loopback TCP port, the robot side with
``[policy]`` (its key files relative to its config) and the simulated arm; the robot's loop moves the
arm with the remote's chunks."""

from __future__ import annotations

import shutil
import signal
import socket
from pathlib import Path

from runtime.client import PolicyClient
from tests.control.conftest import CALIBRATION, IMAGE, Camera, wait_for
from tests.daemon.conftest import ServeProcess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_daemons_from_their_config_files(
    demo_bundle: Path, keys: dict[str, Path], short_dir: Path, camera: Camera
) -> None:
    port = _free_port()
    remote_toml = short_dir / "policy.toml"
    remote_toml.write_text(
        f"""
[engine]
bundle = "{demo_bundle}"
parity_runs = 4
[server]
endpoints = ["tcp://127.0.0.1:{port}"]
[server.curve]
server_secret_key = "{keys["server_secret"]}"
authorized_keys_dir = "{keys["allowed"]}"
[arm]
kind = "none"
"""
    )
    robot_dir = short_dir / "robot"
    (robot_dir / "keys").mkdir(parents=True)
    shutil.copy(keys["server_public"], robot_dir / "keys" / "server.key")
    shutil.copy(keys["robot_secret"], robot_dir / "keys" / "robot.key_secret")
    robot_toml = robot_dir / "robot.toml"
    robot_toml.write_text(
        f"""
[policy]
endpoint = "tcp://127.0.0.1:{port}"
server_public_key = "keys/server.key"
client_secret_key = "keys/robot.key_secret"
[server]
endpoints = ["ipc://{short_dir}/robot.sock"]
[arm]
kind = "sim"
calibration = "{CALIBRATION}"
[control]
rt_priority = 0
[[control.streams]]
input = "{IMAGE}"
endpoint = "{camera.endpoint}"
max_age_ms = 500.0
"""
    )
    remote = ServeProcess(remote_toml)
    robot: ServeProcess | None = None
    try:
        remote.wait_line("ready: ")
        robot = ServeProcess(robot_toml)
        ready = robot.wait_line("ready: ")
        assert f"driving demo_act_residual served at tcp://127.0.0.1:{port}" in ready
        with PolicyClient(f"ipc://{short_dir}/robot.sock", timeout_s=5) as client:
            wait_for(lambda: not client.control("status")["stale_streams"], timeout=20, what="camera frames")
            assert client.control("start", who="test")["accepted"]
            wait_for(lambda: client.control("status")["counters"].get("chunks", 0) >= 3, timeout=30, what="chunks")
            assert client.control("status")["policy"]["link"] == "up"
        robot.proc.send_signal(signal.SIGTERM)
        assert robot.wait() == 0, robot.output
        remote.proc.send_signal(signal.SIGTERM)
        assert remote.wait() == 0, remote.output
    finally:
        if robot is not None:
            robot.kill()
        remote.kill()


def test_a_robot_asking_another_host_without_keys_does_not_start(short_dir: Path) -> None:
    robot_toml = short_dir / "robot.toml"
    robot_toml.write_text('[policy]\nendpoint = "tcp://10.0.0.2:5555"\n[arm]\nkind = "sim"\n')
    robot = ServeProcess(robot_toml)
    try:
        assert robot.wait() != 0
        assert "policy.endpoint: tcp://10.0.0.2:5555 is another host" in robot.output
    finally:
        robot.kill()
