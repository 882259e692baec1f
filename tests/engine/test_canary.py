"""The serving canary on a stand-in engine and a clock the test moves: when a check is due, what each
check records, and a failure that stays (the server's side: tests/server/test_canary.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import SimpleNamespace

import numpy as np
import pytest

from runtime.bundle.bundle import TestCase
from runtime.engine.canary import Canary, CanaryState

STATE = "observation.state"
ACTION = "action"
REF = np.array([[0.5, -1.0, 2.0], [0.0, 0.25, -0.5]], np.float32)
TOL = {"f32": 1e-3, "bf16": 0.05, "int8": 0.2}


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Engine:
    """Answers the reference plus ``errors[n]`` at [1, 2] on its n-th run, each run taking ``ms[n]``."""

    def __init__(
        self,
        clock: Clock,
        errors: list[float] | None = None,
        ms: list[float] | None = None,
        *,
        precision: str = "f32",
        program: str = "f32",
        fail: Exception | None = None,
    ) -> None:
        self.clock = clock
        self.errors = errors or [0.0] * 10
        self.ms = ms or [1.0] * 10
        self.fail = fail
        self.seen: list[Mapping[str, np.ndarray]] = []
        self.seen_values: list[np.ndarray] = []
        self.info = SimpleNamespace(device="CPU", precision=precision)
        self.manifest = SimpleNamespace(programs={"CPU": SimpleNamespace(precision=program)})

    def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(self.seen)
        self.seen.append(inputs)
        self.seen_values.append(inputs[STATE].copy())
        self.clock.t += self.ms[n] / 1e3
        inputs[STATE][...] = -7.0  # a program that writes into its input buffers
        if self.fail is not None:
            raise self.fail
        out = REF.copy()
        out[1, 2] += self.errors[n]
        return {ACTION: out}


def case(**kw: object) -> TestCase:
    return TestCase({STATE: np.array([1.0, 2.0, 3.0], np.float32)}, {ACTION: REF.copy()}, dict(TOL), **kw)  # type: ignore[arg-type]


def test_the_interval_must_be_positive() -> None:
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError) as info:
            Canary(case(), bad)
        assert str(info.value) == f"canary interval: expected > 0 seconds, got {bad}"


def test_a_new_canary_has_checked_nothing() -> None:
    c = Canary(case(), 2.5, clock=Clock())
    assert c.interval_s == 2.5 and c.failure is None
    assert c.state == CanaryState(2.5)
    assert c.state.to_wire() == {
        "interval_s": 2.5,
        "checks": 0,
        "last_max_abs_err": None,
        "worst_max_abs_err": None,
        "tolerance": None,
        "units": None,
        "last_check_ms": None,
        "max_check_ms": None,
        "failed": False,
        "failure": None,
    }


def test_the_first_check_is_due_one_interval_after_creation() -> None:
    clock = Clock(100.0)
    c = Canary(case(), 5.0, clock=clock)
    assert c.seconds_until_due() == 5.0
    clock.t = 103.0
    assert c.seconds_until_due() == 2.0
    assert not c.due(idle=True)
    clock.t = 105.0
    assert c.seconds_until_due() == 0.0
    assert c.due(idle=True) and not c.due(idle=False)
    clock.t = 107.0
    assert c.seconds_until_due() == 0.0  # never negative


def test_under_load_a_check_runs_once_a_whole_period_late() -> None:
    clock = Clock(100.0)
    c = Canary(case(), 5.0, clock=clock)
    clock.t = 109.999
    assert not c.due(idle=False)
    clock.t = 110.0
    assert c.due(idle=False) and c.due(idle=True)


def test_the_next_check_is_due_an_interval_after_the_last_one_ended() -> None:
    clock = Clock(100.0)
    c = Canary(case(), 5.0, clock=clock)
    clock.t = 112.0
    assert c.check(Engine(clock, ms=[500.0]))  # ends at 112.5
    assert c.seconds_until_due() == pytest.approx(5.0)
    assert not c.due(idle=True)
    clock.t = 117.5
    assert c.due(idle=True) and not c.due(idle=False)
    clock.t = 122.5
    assert c.due(idle=False)


def test_a_good_check_records_its_error_tolerance_units_and_time() -> None:
    clock = Clock()
    c = Canary(case(scale={ACTION: (2.0, 2.0, 2.0)}, scale_source="action std"), 1.0, clock=clock)
    assert c.check(Engine(clock, errors=[0.001], ms=[1.23456]))
    s = c.state
    assert s.checks == 1 and not s.failed and s.failure is None and c.failure is None
    assert s.last_max_abs_err == pytest.approx(0.0005, rel=1e-3) and s.worst_max_abs_err == s.last_max_abs_err
    assert s.tolerance == 1e-3 and s.units == "action std" and s.interval_s == 1.0
    assert s.last_check_ms == 1.235 and s.max_check_ms == 1.235


def test_the_worst_error_and_the_longest_check_are_kept() -> None:
    clock = Clock()
    c = Canary(case(), 1.0, clock=clock)
    engine = Engine(clock, errors=[0.0001, 0.0003, 0.0002], ms=[2.0, 5.0, 1.0])
    for _ in range(3):
        assert c.check(engine)
    s = c.state
    assert s.checks == 3
    assert s.last_max_abs_err == pytest.approx(0.0002, rel=1e-3)
    assert s.worst_max_abs_err == pytest.approx(0.0003, rel=1e-3)
    assert s.last_check_ms == pytest.approx(1.0) and s.max_check_ms == pytest.approx(5.0)


def test_an_error_of_zero_is_recorded_as_the_worst() -> None:
    clock = Clock()
    c = Canary(case(), 1.0, clock=clock)
    assert c.check(Engine(clock, errors=[0.0]))
    assert c.state.last_max_abs_err == 0.0 and c.state.worst_max_abs_err == 0.0


def test_the_engine_reads_private_copies_refreshed_before_each_check() -> None:
    clock = Clock()
    tc = case()
    c = Canary(tc, 1.0, clock=clock)
    engine = Engine(clock)
    assert c.check(engine) and c.check(engine)
    np.testing.assert_array_equal(tc.inputs[STATE], [1.0, 2.0, 3.0])  # the case's own inputs untouched
    assert engine.seen[0] is not tc.inputs and engine.seen[0][STATE] is not tc.inputs[STATE]
    for values in engine.seen_values:  # each run saw the case's inputs, not what the last run wrote
        np.testing.assert_array_equal(values, [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("precision", "program", "tolerance"), [("f32", "f32", 1e-3), ("bf16", "bf16", 0.05), ("bf16", "int8", 0.2)]
)
def test_the_tolerance_is_the_one_for_what_the_engine_runs(precision: str, program: str, tolerance: float) -> None:
    clock = Clock()
    c = Canary(case(), 1.0, clock=clock)
    c.check(Engine(clock, precision=precision, program=program))
    assert c.state.tolerance == tolerance


def test_a_wrong_answer_fails_the_canary_for_good(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    c = Canary(case(), 1.0, clock=clock)
    engine = Engine(clock, errors=[0.0, 0.5, 0.0], ms=[1.0, 3.0, 1.0])
    assert c.check(engine)
    with caplog.at_level(logging.ERROR, logger="runtime.engine.canary"):
        assert not c.check(engine)
    expected = (
        "verification failed on canary check 2: max abs error 0.5 in output 'action' at [1, 2] "
        "(got 0, reference -0.5, absolute difference 0.5; tolerance 0.001); "
        "the engine's answers can no longer be trusted, reload the policy"
    )
    s = c.state
    assert s.failed and s.failure == expected and c.failure == expected
    assert s.checks == 2 and s.last_max_abs_err == 0.5 and s.worst_max_abs_err == 0.5
    assert s.last_check_ms == 3.0 and s.max_check_ms == 3.0 and s.units == "absolute"
    assert [r.getMessage() for r in caplog.records] == [expected]
    # failed stays failed: no more checks, none due, the engine not run, the state as it was
    clock.t += 100.0
    assert not c.due(idle=True) and not c.due(idle=False) and c.seconds_until_due() is None
    assert not c.check(engine)
    assert len(engine.seen) == 2 and c.state is s


def test_an_engine_that_raises_fails_the_canary_naming_the_exception() -> None:
    clock = Clock()
    tc = case(scale={ACTION: (1.0, 1.0, 1.0)}, scale_source="action std")
    c = Canary(tc, 1.0, clock=clock)
    good = Engine(clock, errors=[0.0002])
    assert c.check(good)
    broken = Engine(clock, ms=[4.0], fail=RuntimeError("Exception from src/plugin.cpp: bad shape"))
    assert not c.check(broken)
    s = c.state
    assert s.failure == (
        "verification failed on canary check 2: the test case no longer runs: RuntimeError: "
        "Exception from src/plugin.cpp: bad shape; the engine's answers can no longer be trusted, reload the policy"
    )
    assert s.failed and s.checks == 2 and s.last_max_abs_err is None
    assert s.worst_max_abs_err == pytest.approx(0.0002, rel=1e-3)
    assert s.units == "action std" and s.tolerance == 1e-3 and s.last_check_ms == 4.0


def test_a_first_check_that_raises_has_no_units_yet() -> None:
    clock = Clock()
    c = Canary(case(), 1.0, clock=clock)
    assert not c.check(Engine(clock, fail=ValueError("x")))
    assert c.state.units is None and c.state.worst_max_abs_err is None and c.state.checks == 1
    assert c.state.failure is not None and "the test case no longer runs: ValueError: x;" in c.state.failure


def test_a_failed_state_on_the_wire() -> None:
    clock = Clock()
    c = Canary(case(), 0.5, clock=clock)
    c.check(Engine(clock, errors=[0.5], ms=[2.0]))
    assert c.state.to_wire() == {
        "interval_s": 0.5,
        "checks": 1,
        "last_max_abs_err": 0.5,
        "worst_max_abs_err": 0.5,
        "tolerance": 1e-3,
        "units": "absolute",
        "last_check_ms": 2.0,
        "max_check_ms": 2.0,
        "failed": True,
        "failure": c.failure,
    }


def test_a_first_check_under_a_millisecond_is_the_longest_so_far() -> None:
    clock = Clock()
    c = Canary(case(), 1.0, clock=clock)
    assert c.check(Engine(clock, ms=[0.25]))
    assert c.state.last_check_ms == 0.25 and c.state.max_check_ms == 0.25
