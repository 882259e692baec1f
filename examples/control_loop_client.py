"""A control loop asking the policy server for action chunks (run `lerobot-runtime serve` first)."""

from __future__ import annotations

import sys
import time

import numpy as np

from runtime.client import PolicyClient
from runtime.protocol.errors import BusyError

endpoint = sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:5555"
with PolicyClient(endpoint, timeout_s=1.0) as client:
    info = client.hello()
    print(f"{info.policy_name} on {info.device}/{info.precision}: {info.chunk_length} x {info.action_names}")
    rng = np.random.default_rng(0)
    for _ in range(10):
        obs = {t.name: rng.integers(0, 255, t.shape).astype(t.dtype) for t in info.inputs}
        try:
            chunk = client.infer(obs)
        except BusyError:
            continue
        t = chunk.timing
        print(f"chunk {chunk.actions.shape}: infer {t.infer_ms:.2f} ms, round trip {chunk.round_trip_ms:.2f} ms")
        time.sleep(1 / info.control_rate_hz)
