"""``control.*`` requests: the operator's way into the control loop, and the loop's way to inference.

:class:`LoopControl` answers on the server's I/O thread. It only checks, sets flags and reads the
loop's per-tick snapshot; the loop carries the request out at its next tick. :class:`ServerInference`
hands the loop's observations to the server's inference worker, ahead of network clients.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from runtime.arm_control.feed import Inference
from runtime.arm_control.interface import ArmControl
from runtime.arm_control.streams import ObservationStreams
from runtime.arm_control.teleop import TeleopControl
from runtime.control.config import RtcConfig
from runtime.control.feed import OnDone, Prefix
from runtime.control.latch import ControlRefused, StaleLatch, estop_status
from runtime.protocol.errors import ControlRefusedError
from runtime.protocol.messages import ControlRequest, PrefixFields, TeleopRequest
from runtime.server.server import PolicyServer


class ServerInference:
    def __init__(self, server: PolicyServer, task: str = "", rtc: RtcConfig | None = None) -> None:
        self.server = server
        #: the instruction every request of the loop carries (a language policy needs one)
        self.task = task
        #: how the loop's leftovers are followed (``[control.rtc]``; absent keys: the bundle's)
        self.rtc = rtc or RtcConfig()

    def submit(
        self, inputs: list[np.ndarray], on_done: OnDone, *, reset: bool = False, prefix: Prefix | None = None
    ) -> bool:
        fields = None
        if prefix is not None:
            rtc = self.rtc
            fields = PrefixFields(
                prefix.actions,
                prefix.delay,
                rtc.execution_horizon,
                rtc.prefix_attention_schedule,
                rtc.max_guidance_weight,
            )
        return self.server.submit_local(inputs, on_done, reset=reset, task=self.task or None, rtc=fields)

    def observe(self, inputs: list[np.ndarray], *, reset: bool = False) -> None:
        self.server.observe_local(inputs, reset=reset, task=self.task or None)

    @property
    def takes_task(self) -> bool:
        return bool(getattr(self.server, "takes_task", False))

    def failure(self) -> str | None:
        failure: str | None = getattr(self.server, "verification_failure", None)
        return failure

    def unreachable(self) -> str | None:
        return None  # in this process

    def describe(self) -> dict[str, Any]:
        info = self.server.info
        return {"where": "local", "policy": info.policy_name, "engine": dict(info.engine)}

    def pending(self) -> str | None:
        pending: str | None = getattr(self.server, "gate_pending", None)
        return pending


class LoopControl:
    def __init__(
        self,
        loop: ArmControl,
        state_dir: Path,
        inference_thread: int = 0,
        streams: ObservationStreams | None = None,
        inference: Inference | None = None,
    ) -> None:
        self.loop = loop
        self.streams = streams
        #: where the loop's requests go: the task a start names is set there
        self.inference = inference
        self.state_dir = state_dir
        self.inference_thread = inference_thread
        self.teleop = TeleopControl(loop)

    def handle(self, request: ControlRequest | TeleopRequest, client: str) -> dict[str, Any]:
        if isinstance(request, TeleopRequest):
            return self.teleop.handle(request, client)
        loop = self.loop
        who = f"{request.who} (client {client})" if request.who else f"client {client}"
        kind = request.kind
        if kind == "control.status":
            return self.status()
        if kind == "control.estop":
            latch = loop.request_estop(request.reason or f"requested by {who}")
            return {"mode": loop.snapshot().mode.value, "estop": estop_status(latch)}
        if kind == "control.dump":
            loop.dump_requests.append(f"requested by {who}")
            return {"directory": str(self.state_dir)}
        command = kind.split(".", 1)[1]
        holder = self.teleop.holder()
        if holder is not None and command in ("start", "stop", "teleop"):
            # Others may watch (control.status) and e-stop, but the station holding the arm commands it.
            raise ControlRefusedError(
                f"{kind}: a teleop station holds the arm ({holder}); it hands back with teleop.hand_back",
                field="kind",
                request_id=request.id,
            )
        if command == "teleop" and self.teleop.local is None:
            raise ControlRefusedError(
                f"{kind}: this daemon reads no leader of its own ([teleop] leader_port is empty); "
                "a station takes over with lerobot-runtime teleop",
                field="kind",
                request_id=request.id,
            )
        pending = self.inference.pending() if self.inference is not None else None
        if pending and command == "start":
            # teleop and everything else works meanwhile; the policy's first chunk waits for the whole gate
            raise ControlRefusedError(
                f"{kind}: {pending}; the policy is asked only once it has passed (a few seconds after "
                "start-up): start again then",
                field="kind",
                request_id=request.id,
            )
        task = self._task_for(command, request)
        try:
            loop.check(command, request.latch)
        except StaleLatch as e:
            raise ControlRefusedError(
                f"{kind}: {e}",
                field="body.latch",
                expected=str(e.current.id),
                received=str(e.named),
                request_id=request.id,
            ) from None
        except ControlRefused as e:
            raise ControlRefusedError(f"{kind}: {e}", field="kind", request_id=request.id) from None
        if task is not None and self.inference is not None:
            self.inference.task = task
        loop.request(command, who, request.latch)
        if command == "release":
            # Accepted means queued: an e-stop before the next tick still wins (the log says so).
            return {"accepted": True, "mode": loop.snapshot().mode.value, "latch": request.latch}
        return {"accepted": True, "mode": loop.snapshot().mode.value}

    def _task_for(self, command: str, request: ControlRequest) -> str | None:
        """The task a ``control.start`` leaves the loop with (None: unchanged), refused by name when the
        policy follows an instruction and none is known, or when it takes none and one came."""
        if command != "start" or self.inference is None:
            return None
        takes = self.inference.takes_task
        if request.task and not takes:
            raise ControlRefusedError(
                f"{request.kind} body.task: this policy takes no task (it follows no instruction)",
                field="body.task",
                expected="no task",
                received=f"{len(request.task)} characters",
                request_id=request.id,
            )
        task = request.task or self.inference.task
        if takes and not task:
            raise ControlRefusedError(
                f"{request.kind} body.task: this policy follows an instruction and the loop has none: "
                "control start --task TEXT, or [control] task in the config",
                field="body.task",
                expected="a task",
                received="nothing",
                request_id=request.id,
            )
        return task

    def status(self) -> dict[str, Any]:
        status = self.loop.status()
        # OS thread ids, to check where they really run (/proc/PID/task/TID/stat field 39)
        status["threads"] = {"control": self.loop.snapshot().native_id, "inference": self.inference_thread}
        # ... and the processes they are threads of (the loop's is the arm process, when it has one)
        status["processes"] = {"control": self.loop.pid, "inference": os.getpid()}
        status["teleop"]["session"] = self.teleop.status()
        if self.inference is not None:
            status["task"] = self.inference.task
            status["policy"] = self.inference.describe()
        streams = self.streams
        if streams is not None:
            status["streams"] = {
                name: {
                    "endpoint": streams.endpoints[name],
                    "received": streams.received[name],
                    "refused": streams.refused[name],
                    "max_age_ms": streams.configs[name].max_age_ms,
                }
                for name in streams.names
            }
        return status
