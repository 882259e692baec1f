"""Real-time chunking's prefix weights, worked out by hand for each schedule and edge.

(``tests/server/test_rtc.py`` checks them against LeRobot's own ``get_prefix_weights`` when LeRobot is
installed; these need nothing but numpy.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from runtime.bundle.rtc import (
    DEFAULT_EXECUTION_HORIZON,
    DEFAULT_MAX_GUIDANCE_WEIGHT,
    DEFAULT_SCHEDULE,
    SCHEDULES,
    no_prefix_weights,
    prefix_weights,
)


def _exp(values: list[float]) -> list[float]:
    return [v * math.expm1(v) / (math.e - 1) for v in values]


def test_lerobots_schedules_and_defaults() -> None:
    assert SCHEDULES == ("ZEROS", "ONES", "LINEAR", "EXP")
    assert (DEFAULT_EXECUTION_HORIZON, DEFAULT_SCHEDULE, DEFAULT_MAX_GUIDANCE_WEIGHT) == (10, "LINEAR", 10.0)


# (delay, execution_horizon, chunk_size, steps): expected weights per schedule
CASES = [
    # the delay frozen, a decay to 0 at the horizon, nothing past it
    ((2, 6, 8, 10), {"LINEAR": [1, 1, 0.8, 0.6, 0.4, 0.2, 0, 0], "ZEROS": [1, 1] + [0] * 6, "ONES": [1] * 6 + [0] * 2}),
    # a leftover of 4 steps caps the horizon at 4
    ((2, 6, 8, 4), {"LINEAR": [1, 1, 2 / 3, 1 / 3, 0, 0, 0, 0], "ZEROS": [1, 1] + [0] * 6, "ONES": [1] * 4 + [0] * 4}),
    # a delay past the horizon: the horizon frozen, nothing decays
    ((7, 6, 8, 10), {"LINEAR": [1] * 6 + [0, 0], "ZEROS": [1] * 6 + [0, 0], "ONES": [1] * 6 + [0, 0]}),
    # a horizon past the chunk: the decay cut at the chunk's end
    (
        (2, 10, 8, 20),
        {"LINEAR": [1, 1, 6 / 7, 5 / 7, 4 / 7, 3 / 7, 2 / 7, 1 / 7], "ZEROS": [1, 1] + [0] * 6, "ONES": [1] * 8},
    ),
    # a delay past the chunk: every step frozen
    ((10, 12, 8, 20), {"LINEAR": [1] * 8, "ZEROS": [1] * 8, "ONES": [1] * 8}),
    # a delay past the chunk by more than two steps: still every step frozen
    ((11, 12, 8, 20), {"LINEAR": [1] * 8, "ZEROS": [1] * 8, "ONES": [1] * 8}),
    # one step decays: halfway
    ((2, 3, 8, 10), {"LINEAR": [1, 1, 0.5, 0, 0, 0, 0, 0], "ZEROS": [1, 1] + [0] * 6, "ONES": [1] * 3 + [0] * 5}),
    # no delay
    ((0, 4, 6, 10), {"LINEAR": [0.8, 0.6, 0.4, 0.2, 0, 0], "ZEROS": [0] * 6, "ONES": [1] * 4 + [0] * 2}),
    # the horizon exactly the chunk
    ((1, 5, 5, 5), {"LINEAR": [1, 0.8, 0.6, 0.4, 0.2], "ZEROS": [1, 0, 0, 0, 0], "ONES": [1] * 5}),
    # the delay exactly the horizon
    ((3, 3, 5, 9), {"LINEAR": [1, 1, 1, 0, 0], "ZEROS": [1, 1, 1, 0, 0], "ONES": [1, 1, 1, 0, 0]}),
]


@pytest.mark.parametrize(("args", "expected"), CASES)
@pytest.mark.parametrize("schedule", ["LINEAR", "ZEROS", "ONES", "EXP"])
def test_prefix_weights(args: tuple[int, int, int, int], expected: dict[str, list[float]], schedule: str) -> None:
    delay, horizon, chunk, steps = args
    w = prefix_weights(delay, horizon, chunk, schedule, steps)
    assert w.dtype == np.float32 and w.shape == (chunk,)
    # EXP: the linear decay's values v mapped to v * (e^v - 1) / (e - 1); the frozen ones stay 1
    want = _exp(expected["LINEAR"]) if schedule == "EXP" else expected[schedule]
    np.testing.assert_allclose(w, np.asarray(want, np.float32), rtol=1e-6, atol=1e-7)


def test_exp_weights_worked_by_hand() -> None:
    # delay 1, horizon 3: the linear decay is 2/3, 1/3 on steps 1 and 2
    w = prefix_weights(1, 3, 4, "EXP", 10)
    values = [1.0, (2 / 3) * (math.exp(2 / 3) - 1) / (math.e - 1), (1 / 3) * (math.exp(1 / 3) - 1) / (math.e - 1), 0.0]
    np.testing.assert_allclose(w, np.asarray(values, np.float32), rtol=1e-6)


def test_an_unknown_schedule_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError) as e:
        prefix_weights(1, 5, 10, "linear", 10)
    assert str(e.value) == "prefix_attention_schedule: expected one of ZEROS, ONES, LINEAR, EXP, got 'linear'"


def test_no_prefix_weights_are_zero() -> None:
    w = no_prefix_weights(7)
    assert w.dtype == np.float32 and w.shape == (7,)
    assert not w.any()
