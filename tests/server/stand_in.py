"""A stand-in engine and a raw ZeroMQ caller for the server's tests (no OpenVINO, no export).

The engine's chunk is the newest state frame plus the step number, so every reply can be written out
by hand; every run's inputs are kept; a run can be held at its start (``hold``) so tests fill the
queue behind it. The caller speaks to a server as any client would: a DEALER socket, a hand-made
request, the whole reply decoded.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import zmq

from runtime.bundle.manifest import Manifest, ProgramEntry, TensorSpec, TestCaseEntry
from runtime.engine.base import Engine, EngineInfo
from runtime.protocol import codec

STATE = "observation.state"
JOINTS, STEPS = 3, 2
WAIT_S = 2.0  # every wait of these tests: a bug that hangs fails in 2 s instead of mutmut's timeout
INFO = EngineInfo("openvino", "CPU", "f32", 1, (0,), "(test bundle)", "(in memory)", "2099.1")


def manifest(*extra: TensorSpec, history: int = 1, **fields: Any) -> Manifest:
    zeros = "0" * 64
    state_shape = (history, JOINTS) if history > 1 else (JOINTS,)
    values: dict[str, Any] = {
        "policy_name": "stand-in",
        "inputs": (TensorSpec(STATE, "float32", state_shape, "state"), *extra),
        "outputs": (TensorSpec("action", "float32", (STEPS, JOINTS), "action"),),
        "action_output": "action",
        "chunk_length": STEPS,
        "action_names": ("a", "b", "c"),
        "control_rate_hz": 30.0,
        "programs": {"CPU": ProgramEntry("CPU", "p.pte", "f32", zeros, "full", "")},
        "test_case": TestCaseEntry("test_case.npz", zeros),
        "observation_history": history,
        **fields,
    }
    return Manifest(**values)


def chunk(state: Any) -> np.ndarray:
    """The stand-in's answer to the newest state frame ``state``: step i is ``state + i``."""
    s = np.asarray(state, np.float32)
    return np.stack([s + i for i in range(STEPS)]).astype(np.float32)


class StandIn(Engine):
    def __init__(self, m: Manifest | None = None, info: EngineInfo = INFO) -> None:
        super().__init__(m if m is not None else manifest(), info)
        self.runs: list[list[np.ndarray]] = []
        self.entered = threading.Semaphore(0)  # released as each run starts
        self.hold = False  # runs wait for release() while set, at most hold_s
        self.hold_s = WAIT_S
        self._go = threading.Event()
        self.closed = 0

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        self.runs.append([np.array(a, copy=True) for a in arrays])
        self.entered.release()
        if self.hold:
            self._go.wait(self.hold_s)
        return {"action": chunk(arrays[0].reshape(-1, JOINTS)[-1])}

    def release(self) -> None:
        self.hold = False
        self._go.set()

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=WAIT_S), "the worker did not start a run"

    def close(self) -> None:
        self.closed += 1


def state(v: float) -> np.ndarray:
    return np.full(JOINTS, v, np.float32)


class Caller:
    """One client: a DEALER socket on ``endpoint`` (its routing id is ``identity`` when given)."""

    def __init__(self, ctx: zmq.Context, endpoint: str, identity: bytes | None = None) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        if identity is not None:
            self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.connect(endpoint)

    def send(self, frames: list[Any]) -> None:
        self.sock.send_multipart(frames)

    def receive(self) -> codec.Reply:
        assert self.sock.poll(int(WAIT_S * 1000)), "no reply"
        return codec.decode_reply(self.sock.recv_multipart())

    def nothing(self, wait_ms: int = 200) -> bool:
        return not self.sock.poll(wait_ms)

    def call(self, kind: str, rid: int = 1, observation: Any = None, body: Any = None) -> codec.Reply:
        self.send(codec.encode_request(kind, rid, observation, body))
        return self.receive()

    def close(self) -> None:
        self.sock.close(0)


def error_of(reply: codec.Reply) -> tuple[Any, ...]:
    """An error reply as (id, kind, code, message, field, expected, received)."""
    assert not reply.ok and reply.error is not None, reply
    e = reply.error
    return (reply.id, reply.kind, e.code, e.message, e.field, e.expected, e.received)
