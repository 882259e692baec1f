"""A staged load served: the server is up after the gate's first replays, and answers nothing before the
rest of the gate passed; a request sent meanwhile waits and is answered after it (the demo bundle on
OpenVINO, a real client over ipc)."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.bundle.bundle import Bundle
from runtime.client import PolicyClient
from runtime.engine.base import Engine
from runtime.engine.config import EngineConfig
from runtime.engine.loader import load_engine
from runtime.protocol.errors import VerificationFailedError
from runtime.server.config import ServerConfig
from runtime.server.server import PolicyServer

from .conftest import wait_until

pytestmark = pytest.mark.timeout(60, method="thread")


@pytest.fixture
def staged(demo_bundle: Path) -> Iterator[tuple[Engine, threading.Event]]:
    """The demo bundle loaded as the daemon loads it, the rest of its gate held until the event is set."""
    before = os.sched_getaffinity(0)
    engine = load_engine(EngineConfig(bundle=str(demo_bundle), engine="openvino", parity_runs=6), staged=True)
    os.sched_setaffinity(0, before)
    gate = engine.pending_gate
    assert gate is not None and gate.passed == 2
    release = threading.Event()
    finish = gate.finish

    def held(beat: Any = None) -> Any:
        assert release.wait(20), "the test never released the gate"
        return finish(beat)

    gate.finish = held  # type: ignore[method-assign]
    yield engine, release
    release.set()
    engine.close()


def test_a_request_sent_while_the_gate_runs_is_answered_after_it_passed(
    staged: tuple[Engine, threading.Event], demo_bundle: Path, short_tmp: Path
) -> None:
    engine, release = staged
    case = Bundle.open(demo_bundle).test_case()
    with (
        PolicyServer(engine, ServerConfig(endpoints=("ipc://p.sock",)), runtime_directory=short_tmp) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as client,
    ):
        assert server.gate_pending == "the parity gate is still running: 2 of 6 replays passed"
        assert client.hello().policy_name == "demo_act_residual"  # the server answers everything else
        assert server.snapshot().verification["gate"] == {"passed": 2, "runs": 6, "done": False, "failure": None}
        got: list[Any] = []
        asked = threading.Thread(target=lambda: got.append(client.infer(case.inputs)))
        asked.start()
        wait_until(lambda: len(server.queue) == 1, what="the request queued behind the gate")
        assert got == [] and server.snapshot().replies_ok == 1  # the hello only
        release.set()
        asked.join(20)
        assert server.gate_pending is None and server.verification_failure is None
        np.testing.assert_allclose(got[0].actions, case.outputs["action"], atol=2e-5)
        assert got[0].timing.queue_ms > 0  # it waited for the gate
        assert server.snapshot().verification["gate"] == {"passed": 6, "runs": 6, "done": True, "failure": None}


def test_a_gate_that_fails_after_ready_refuses_the_request_waiting_for_it(
    staged: tuple[Engine, threading.Event], demo_bundle: Path, short_tmp: Path
) -> None:
    engine, release = staged
    case = Bundle.open(demo_bundle).test_case()
    gate = engine.pending_gate
    assert gate is not None
    # the reference the rest of the gate holds the program to, moved: the program no longer matches it
    gate.case = dataclasses.replace(gate.case, outputs={k: v + 1.0 for k, v in gate.case.outputs.items()})
    with (
        PolicyServer(engine, ServerConfig(endpoints=("ipc://p.sock",)), runtime_directory=short_tmp) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as client,
    ):
        release.set()
        with pytest.raises(VerificationFailedError) as e:
            client.infer(case.inputs)
        failure = server.verification_failure
        assert failure is not None and failure.startswith("the parity gate failed after the daemon was ready: ")
        assert "on replay 3 of 6" in failure and e.value.message.startswith(failure)
        assert server.snapshot().verification["gate"]["failure"] == failure


def test_the_daemon_is_ready_before_the_rest_of_the_gate_says_so_and_says_when_it_passed(
    staged: tuple[Engine, threading.Event], short_tmp: Path
) -> None:
    from drivers.config import ArmConfig
    from runtime.config import DaemonConfig, DaemonSettings
    from runtime.daemon import Daemon
    from tests.server.test_daemon_lifecycle import RecordingNotifier

    engine, release = staged
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="none"),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, state_dir=str(short_tmp / "state")),
    )
    notifier = RecordingNotifier()
    d = Daemon(config, engine_factory=lambda: engine, notifier=notifier)
    try:
        d.startup()
        where = f"ipc://{short_tmp}/policy.sock"
        ready = [f for f, _, _ in notifier.sent if "READY=1" in f]
        assert ready and (
            f"STATUS=serving demo_act_residual on CPU/f32 at {where}; the parity gate is still running: 2 of 6 "
            "replays passed, the first chunk after it; no arm"
        ) in ready[0]
        notifier.sent.clear()
        d.on_tick(0.01)
        assert notifier.sent == []  # nothing new while it runs
        release.set()
        assert d.server is not None
        wait_until(lambda: d.server is not None and d.server.gate_pending is None, what="the gate to pass")
        d.on_tick(0.02)
        d.on_tick(0.03)
        assert [f for f, _, _ in notifier.sent if any(x.startswith("STATUS=") for x in f)] == [
            (f"STATUS=serving demo_act_residual on CPU/f32 at {where}",)
        ]
    finally:
        d.shutdown()
