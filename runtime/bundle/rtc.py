"""Real-time chunking (RTC): the prefix weights and guidance cap a program with a prefix input takes.

LeRobot's ``RTCProcessor`` guides every flow step of a new chunk towards the previous chunk's
leftover (the actions the robot executes while the new chunk is computed), each step of the chunk
weighted by ``get_prefix_weights(inference_delay, execution_horizon, chunk_size)``: 1 for the first
``inference_delay`` steps (they are executed from the old plan anyway), then a decay to 0 at
``execution_horizon`` (how far the new chunk is pulled towards the old one), by the schedule. The
horizon is capped at the leftover's length, as LeRobot caps it.

The weights depend only on integers, so they are computed here, outside the graph, per request, and
the program takes them as an input (``prefix_weights``): one program serves every delay. Torch-free:
the server runs this (numpy float64, stored as float32: within one float32 rounding of LeRobot's
torch float32, checked by the tests against ``get_prefix_weights`` itself).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

#: LeRobot's ``RTCAttentionSchedule`` values, as its config.json writes them
SCHEDULES: Final = ("ZEROS", "ONES", "LINEAR", "EXP")
#: LeRobot's ``RTCConfig`` defaults
DEFAULT_EXECUTION_HORIZON: Final = 10
DEFAULT_SCHEDULE: Final = "LINEAR"
DEFAULT_MAX_GUIDANCE_WEIGHT: Final = 10.0


def prefix_weights(delay: int, execution_horizon: int, chunk_size: int, schedule: str, steps: int) -> np.ndarray:
    """float32 ``[chunk_size]``: LeRobot's prefix weights for a leftover of ``steps`` actions.

    ``delay``: inference delay in steps (LeRobot's ``inference_delay``); ``execution_horizon`` is
    capped at ``steps`` (LeRobot: a leftover shorter than the horizon leaves nothing to merge past it).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"prefix_attention_schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    end = min(execution_horizon, steps)
    start = min(delay, end)
    total = chunk_size
    if schedule == "ZEROS":
        w = np.zeros(total)
        w[:start] = 1.0
    elif schedule == "ONES":
        w = np.ones(total)
        w[end:] = 0.0
    else:
        n = total - max(total - end, 0) - start
        lin = np.linspace(1.0, 0.0, n + 2)[1:-1] if end > start and n > 0 else np.zeros(0)
        if schedule == "EXP":
            lin = lin * np.expm1(lin) / (math.e - 1)
        w = np.concatenate([np.ones(min(start, total)), lin, np.zeros(max(total - end, 0))])
    return w.astype(np.float32)


def no_prefix_weights(chunk_size: int) -> np.ndarray:
    """All zero: no step is guided, the flow samples as without RTC."""
    return np.zeros(chunk_size, np.float32)
