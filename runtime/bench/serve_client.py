"""The client side of ``bench serve``, run as its own process, as a robot control loop would be.

``python -m runtime.bench.serve_client ENDPOINT MODE SPECS N WARMUP CPU`` sends ``N + WARMUP``
observations built from ``SPECS`` (JSON ``[[name, dtype, shape], ...]``) and prints one JSON list of
``[round_trip_ms, server_infer_ms]`` per measured request. MODE ``served`` goes through
:class:`~runtime.client.PolicyClient`; ``floor`` sends the same encoded frames over a bare DEALER and
waits for the echo. The process pins itself to ``CPU`` (the control-loop CPU) first.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def observation(specs: list[tuple[str, str, list[int]]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    obs: dict[str, np.ndarray] = {}
    for name, dtype, shape in specs:
        dt = np.dtype(dtype)
        dims = tuple(int(d) for d in shape)
        if dt.kind in "ui":
            obs[name] = rng.integers(0, 256, size=dims).astype(dt)
        else:
            obs[name] = rng.standard_normal(dims).astype(dt)
    return obs


def main(argv: list[str]) -> int:
    endpoint, mode, specs, n, warmup, cpu = argv
    if int(cpu) >= 0:
        os.sched_setaffinity(0, {int(cpu)})
    obs = observation(json.loads(specs))
    samples: list[list[float]] = []
    if mode == "served":
        from runtime.client import PolicyClient

        with PolicyClient(endpoint, timeout_s=30.0) as client:
            for i in range(int(n) + int(warmup)):
                chunk = client.infer(obs)
                if i >= int(warmup):
                    samples.append([chunk.round_trip_ms, chunk.timing.infer_ms])
    else:
        import zmq

        from runtime.protocol.codec import encode_request

        ctx = zmq.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.linger = 0
        dealer.connect(endpoint)
        frames = encode_request("infer", 1, obs)
        for i in range(int(n) + int(warmup)):
            t0 = time.perf_counter()
            dealer.send_multipart(frames, copy=False)
            if not dealer.poll(30_000):
                raise TimeoutError(f"floor echo on {endpoint} did not answer")
            dealer.recv_multipart(copy=False)
            if i >= int(warmup):
                samples.append([(time.perf_counter() - t0) * 1e3, 0.0])
        dealer.close(0)
        ctx.term()
    print(json.dumps(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
