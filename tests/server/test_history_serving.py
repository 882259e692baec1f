"""Observation history and server-drawn noise over real ZeroMQ, without LeRobot.

A tiny exported program whose chunk is a known function of its two state frames and its noise, so
every served chunk is checked exactly: which frames the server stacked, in which order, and which
noise it drew. (LeRobot's Diffusion Policy is served against LeRobot itself in
tests/engine/test_lerobot_diffusion.py, where LeRobot is installed.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.export

CHUNK, JOINTS = 4, 6
WEIGHTS = (0.25, 1.0, 0.5)  # oldest frame, newest frame, noise


def make_history_policy() -> tuple[Any, dict[str, Any]]:
    import torch
    from torch import nn

    class TwoFrames(nn.Module):
        def forward(self, state: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            old, new = state[0], state[1]
            return WEIGHTS[0] * old + WEIGHTS[1] * new + WEIGHTS[2] * noise  # [CHUNK, JOINTS]

    gen = torch.Generator().manual_seed(0)
    return TwoFrames().eval(), {
        "observation.state": torch.randn(2, JOINTS, generator=gen),
        "noise": torch.randn(CHUNK, JOINTS, generator=gen),
    }


def expected(old: np.ndarray, new: np.ndarray, noise: np.ndarray) -> np.ndarray:
    return WEIGHTS[0] * old + WEIGHTS[1] * new + WEIGHTS[2] * noise


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("executorch")
    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import load_engine
    from runtime.export.export import export_bundle

    out = tmp_path_factory.mktemp("bundles") / "history"
    before = os.sched_getaffinity(0)
    export_bundle(
        make_history_policy,
        out,
        policy_name="two_frames",
        input_roles={"observation.state": "state", "noise": "noise"},
        observation_history=2,
    )
    loaded = load_engine(EngineConfig(bundle=str(out), engine="openvino", warmup_runs=0))
    os.sched_setaffinity(0, before)
    yield loaded
    loaded.close()


def state(t: float) -> np.ndarray:
    return np.full(JOINTS, t, np.float32) + np.arange(JOINTS, dtype=np.float32) / 10


def test_served_chunks_stack_each_clients_frames_and_the_servers_noise(engine: Any, short_tmp: Path) -> None:
    from runtime.client import PolicyClient
    from runtime.protocol.errors import BadInputError
    from runtime.server import PolicyServer, ServerConfig

    rng = np.random.default_rng(3)  # the server's draws, one per inference in the order they run

    def drawn() -> np.ndarray:
        return rng.standard_normal((CHUNK, JOINTS), dtype=np.float32)

    cfg = ServerConfig(endpoints=("ipc://p.sock",), noise_seed=3, history_max_gap_s=0, canary_interval_s=0)
    with (
        PolicyServer(engine, cfg, runtime_directory=short_tmp) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=10) as a,
        PolicyClient(server.bound_endpoints[0], timeout_s=10) as b,
    ):
        info = a.hello()
        assert [(i.name, i.shape) for i in info.inputs] == [("observation.state", (JOINTS,))]
        assert (info.history_frames, info.noise_inputs) == (2, ("noise",))

        def served(client: PolicyClient, t: float, reset: bool = False) -> np.ndarray:
            return client.infer({"observation.state": state(t)}, reset=reset).actions

        np.testing.assert_allclose(served(a, 1), expected(state(1), state(1), drawn()), atol=1e-5)  # first: repeated
        np.testing.assert_allclose(served(a, 2), expected(state(1), state(2), drawn()), atol=1e-5)  # oldest first
        np.testing.assert_allclose(served(b, 9), expected(state(9), state(9), drawn()), atol=1e-5)  # b's own
        np.testing.assert_allclose(served(a, 3), expected(state(2), state(3), drawn()), atol=1e-5)
        np.testing.assert_allclose(served(a, 4, reset=True), expected(state(4), state(4), drawn()), atol=1e-5)
        # the two-frame shape the program takes is not what a client sends
        with pytest.raises(BadInputError) as err:
            a.infer({"observation.state": np.zeros((2, JOINTS), np.float32)})
        assert (err.value.field, err.value.expected, err.value.received) == ("observation.state", "[6]", "[2, 6]")
        with pytest.raises(BadInputError, match="'noise': the server draws"):
            a.infer({"observation.state": state(5), "noise": np.zeros((CHUNK, JOINTS), np.float32)})
        # refused requests neither entered the history nor drew noise
        np.testing.assert_allclose(served(a, 5), expected(state(4), state(5), drawn()), atol=1e-5)


def test_control_loop_frames_between_asks_are_its_history(engine: Any, short_tmp: Path) -> None:
    """``observe_local`` (every tick the loop does not ask) feeds the history ``submit_local`` then uses;
    a network client's history is apart from it."""
    import threading

    from runtime.client import PolicyClient
    from runtime.server import PolicyServer, ServerConfig

    rng = np.random.default_rng(4)
    cfg = ServerConfig(endpoints=("ipc://p.sock",), noise_seed=4, history_max_gap_s=0, canary_interval_s=0)

    def submit(server: PolicyServer, t: float, reset: bool = False) -> np.ndarray:
        done = threading.Event()
        got: list[Any] = []

        def on_done(actions: Any, error: str | None) -> None:
            got.append(actions if error is None else error)
            done.set()

        assert server.submit_local([state(t)], on_done, reset=reset)
        assert done.wait(10)
        assert isinstance(got[0], np.ndarray), got[0]
        return got[0]

    with (
        PolicyServer(engine, cfg, runtime_directory=short_tmp) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=10) as client,
    ):
        want = expected(state(1), state(1), rng.standard_normal((CHUNK, JOINTS), dtype=np.float32))
        np.testing.assert_allclose(submit(server, 1, reset=True), want, atol=1e-5)
        server.observe_local([state(2)])
        server.observe_local([state(3)])
        want = expected(state(3), state(4), rng.standard_normal((CHUNK, JOINTS), dtype=np.float32))
        np.testing.assert_allclose(submit(server, 4), want, atol=1e-5)
        want = expected(state(8), state(8), rng.standard_normal((CHUNK, JOINTS), dtype=np.float32))
        np.testing.assert_allclose(client.infer({"observation.state": state(8)}).actions, want, atol=1e-5)
        server.observe_local([state(5)], reset=True)  # a new run whose first tick did not ask
        want = expected(state(5), state(6), rng.standard_normal((CHUNK, JOINTS), dtype=np.float32))
        np.testing.assert_allclose(submit(server, 6), want, atol=1e-5)
