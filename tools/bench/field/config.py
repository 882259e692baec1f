"""What ``bench field`` runs: the workload's settings, the bundle it serves, and the daemon's config.

The settings are shared by every part of the bench: the control rate and the cameras' rate, the joint
the station's leader moves, the stall action's rest pose (and how long a kill is watched for it). The
bundle is a two-camera 480x640 ACT-size one exported once into the bundle store; :func:`daemon_config`
writes the TOML the daemon is started with (``lerobot-runtime serve --config``), built-in defaults
where it sets nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.paths import data_root

RATE_HZ = 30.0
CAMERA_FPS = 30.0
JOINT = "shoulder_pan"  # the joint the station's leader moves
MOVE_DEG = 1.0
# where the stall action's rest goes: away from where the arm is driven, so rest goals are told apart
REST_POSE = {"elbow_flex": 20.0}
STALL_TIMEOUT_S = 2.0
REST_SPEED_DEG_S = 15.0
# after a kill: long enough for the stall timeout and the rest move to be seen
AFTER_KILL_S = STALL_TIMEOUT_S + max(abs(v) for v in REST_POSE.values()) / REST_SPEED_DEG_S + 2.5
READY_STEP_TIMEOUT_S = 60.0  # for each step of getting ready: frames, tracking, the policy driving
FIELD_BUNDLE = "field-act-2cam"
FIELD_POLICY = "lerobot_act_2cam_480x640"
CALIBRATION = ("configs", "calibration", "so101_sim.toml")


def calibration_path() -> Path:
    """The simulated SO-101's calibration: the daemon's arm, the servo simulators' and the leader's."""
    return data_root().joinpath(*CALIBRATION)


def field_bundle() -> Path:
    """The two-camera 480x640 ACT-size bundle for the SO-101: a LeRobot ACT checkpoint with LeRobot's
    default sizes and random weights, exported with ``export --lerobot`` once into the bundle store
    and reused while it is current (same lerobot-runtime and OpenVINO versions)."""
    from drivers.calibration import SO101_JOINTS
    from runtime.export.demo import ensure_checkpoint_bundle

    return ensure_checkpoint_bundle(
        FIELD_BUNDLE,
        FIELD_POLICY,
        ("runtime.policies.lerobot_checkpoints", "act", "default", "front,wrist"),
        export_args=("--action-names", ",".join(SO101_JOINTS)),
        fits=lambda m: m.action_names == SO101_JOINTS,
    )


def _q(text: str | Path) -> str:
    return json.dumps(str(text))  # a TOML basic string


def daemon_config(
    workdir: Path,
    bundle: Path,
    port: str,
    tcp_port: int,
    cameras: list[Any],
    seconds: float,
    codec: str,
    encoder_delay_ms: float = 0.0,
) -> Path:
    """``workdir/config.toml``: the daemon on ``bundle``, its arm the simulated chain on ``port``, one
    stream per camera, recording into ``workdir/dataset`` with ``codec``, listening on ipc and on
    ``tcp_port``, its flight recorder holding the whole run."""
    streams = "".join(f"[[control.streams]]\ninput = {_q(c.input)}\nendpoint = {_q(c.endpoint)}\n\n" for c in cameras)
    rest = ", ".join(f"{k} = {v}" for k, v in REST_POSE.items())
    text = f"""# bench field: the daemon on a simulated STS3215 chain (its own process, on a pty), two cameras,
# a teleop station, recording and back-to-back infers; built-in defaults where not set here
[engine]
bundle = {_q(bundle.resolve())}
engine = "openvino"
parity_runs = 4                    # the gate still runs; start-up is not what is measured

[server]
endpoints = [{_q(f"ipc://{workdir}/policy.sock")}, {_q(f"tcp://127.0.0.1:{tcp_port}")}]

[arm]
kind = "feetech"
port = {_q(port)}
calibration = {_q(calibration_path())}

[control]
rate_hz = {RATE_HZ}
recorder_s = {seconds + 120:g}     # the flight recorder holds the whole run (control dump)

{streams}[control.safety]
max_first_step_deg = 360.0         # random weights act anywhere; the envelope still bounds every goal
stall_timeout_s = {STALL_TIMEOUT_S}
stall_action = "rest"
rest_pose = {{ {rest} }}
rest_speed_deg_s = {REST_SPEED_DEG_S}

[recording]
dataset_dir = {_q(workdir / "dataset")}
codec = {_q(codec)}
encoder_delay_ms = {encoder_delay_ms:g}        # > 0: an encoder deliberately too slow

[daemon]
state_dir = {_q(workdir / "state")}
arm_wait_s = 30.0
"""
    path = workdir / "config.toml"
    path.write_text(text)
    return path
