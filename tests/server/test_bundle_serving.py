"""The server over a real exported bundle, and where its threads run."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from runtime.bundle.bundle import Bundle
from runtime.client import PolicyClient
from runtime.engine.base import Engine
from runtime.protocol.errors import BadInputError
from runtime.server import PolicyServer, ServerConfig


def test_demo_bundle_served_end_to_end(demo_engine: Engine, demo_bundle: Path, tmp_path: Path) -> None:
    case = Bundle.open(demo_bundle).test_case()
    with (
        PolicyServer(demo_engine, ServerConfig(endpoints=("ipc://p.sock",)), runtime_directory=tmp_path) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=10) as client,
    ):
        info = client.hello()
        assert info.policy_name == "demo_act_residual"
        assert info.chunk_length == 100 and info.control_rate_hz == 30.0
        assert info.action_names[0] == "shoulder_pan"
        assert [(t.name, t.dtype, tuple(t.shape)) for t in info.inputs] == [
            ("observation.images.front", "uint8", (96, 128, 3)),
            ("observation.state", "float32", (6,)),
        ]
        assert info.engine["engine"] == "openvino" and info.device == "CPU" and info.precision == "f32"
        chunk = client.infer(case.inputs)
        np.testing.assert_allclose(chunk.actions, case.outputs["action"], atol=2e-5)
        assert chunk.timing.infer_ms > 0 and chunk.round_trip_ms >= chunk.timing.total_ms
        bad = dict(case.inputs, **{"observation.state": np.zeros(5, np.float32)})
        with pytest.raises(BadInputError) as err:
            client.infer(bad)
        assert "expected shape [6], got [5]" in str(err.value)
        np.testing.assert_allclose(client.infer(case.inputs).actions, case.outputs["action"], atol=2e-5)


def _threads() -> dict[str, set[int]]:
    """Every thread of this process by name (Python's names where it has them) -> its CPU set."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) in names:
            out[f"{names[int(tid)]}:{tid}"] = os.sched_getaffinity(int(tid))
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[f"{f.read().strip()}:{tid}"] = os.sched_getaffinity(int(tid))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_socket_threads_stay_off_the_inference_cpus(tmp_path: Path) -> None:
    from runtime.engine.affinity import pin_current_thread
    from runtime.server.synthetic import DEMO, SyntheticEngine

    inference = sorted(os.sched_getaffinity(0))[-1:]

    def factory() -> Engine:
        pin_current_thread(inference)
        return SyntheticEngine(DEMO)

    earlier = set(_threads())  # another test's ZeroMQ context may still be winding down
    with PolicyServer(factory, ServerConfig(endpoints=("ipc://p.sock",)), runtime_directory=tmp_path) as server:
        assert server.engine.info.cpus == tuple(inference)
        with PolicyClient(server.bound_endpoints[0], timeout_s=10) as client:
            client.ping()
        threads = _threads()
    io = {
        name: cpus
        for name, cpus in threads.items()
        if name.startswith(("ZMQbg/IO", "lerobot-runtime-io")) and name not in earlier
    }
    assert any(n.startswith("lerobot-runtime-io") for n in io)
    assert any(n.startswith("ZMQbg/IO") for n in io)  # the client's context is closed by now: these are the server's
    for name, cpus in io.items():
        assert not (cpus & set(inference)), f"{name} runs on inference CPU(s) {sorted(cpus & set(inference))}"
    infer = [cpus for name, cpus in threads.items() if name.startswith("lerobot-runtime-in") and name not in earlier]
    assert infer == [set(inference)]


def test_bench_serve_reports_overhead_next_to_both_floors() -> None:
    from runtime.bench.serve import run_bench
    from runtime.server.synthetic import DEMO, SyntheticEngine

    result = run_bench(lambda: SyntheticEngine(DEMO), n=5, warmup=2)
    assert set(result["transports"]) == {"ipc", "tcp"}
    for t in result["transports"].values():
        assert t["round_trip_ms"]["median"] > 0
        assert t["floor_round_trip_ms"]["median"] > 0 and t["floor_cross_cpu_round_trip_ms"]["median"] > 0
        assert t["overhead_to_floor_ratio"] > 0
    assert result["inprocess_infer_ms"]["median"] > 0
