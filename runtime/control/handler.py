"""``control.*`` requests: the operator's way into the control loop, and the loop's way to inference.

:class:`LoopControl` answers on the server's I/O thread. It only checks, sets flags and reads state;
the loop carries the request out at its next tick. :class:`ServerInference` hands the loop's
observations to the server's inference worker, ahead of network clients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from runtime.control.loop import ControlLoop, ControlRefused, OnDone
from runtime.protocol.errors import ControlRefusedError
from runtime.protocol.messages import ControlRequest
from runtime.server.server import PolicyServer


class ServerInference:
    def __init__(self, server: PolicyServer) -> None:
        self.server = server

    def submit(self, inputs: list[np.ndarray], on_done: OnDone) -> bool:
        return self.server.submit_local(inputs, on_done)

    def failure(self) -> str | None:
        failure: str | None = getattr(self.server, "verification_failure", None)
        return failure


class LoopControl:
    def __init__(self, loop: ControlLoop, state_dir: Path, inference_thread: int = 0) -> None:
        self.loop = loop
        self.state_dir = state_dir
        self.inference_thread = inference_thread

    def handle(self, request: ControlRequest, client: str) -> dict[str, Any]:
        loop = self.loop
        who = f"{request.who} (client {client})" if request.who else f"client {client}"
        kind = request.kind
        if kind == "control.status":
            return self.status()
        if kind == "control.estop":
            loop.request_estop(request.reason or f"requested by {who}")
            return {"mode": loop.mode, "estop": {"latched": True, "reason": loop.estop_reason or ""}}
        if kind == "control.dump":
            loop.dump_requests.append(f"requested by {who}")
            return {"directory": str(self.state_dir)}
        command = kind.split(".", 1)[1]
        try:
            loop.check(command)
        except ControlRefused as e:
            raise ControlRefusedError(f"{kind}: {e}", field="kind", request_id=request.id) from None
        loop.request(command, who)
        return {"accepted": True, "mode": loop.mode}

    def status(self) -> dict[str, Any]:
        status = self.loop.status()
        # OS thread ids, to check where they really run (/proc/PID/task/TID/stat field 39)
        status["threads"] = {"control": self.loop.native_id, "inference": self.inference_thread}
        streams = self.loop.streams
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
