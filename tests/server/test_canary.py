"""The serving canary over real sockets: checks between requests, and a failure that stops serving."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import pytest

from runtime.bundle.bundle import TestCase
from runtime.client import PolicyClient
from runtime.errors import ConfigError
from runtime.protocol.errors import VerificationFailedError
from runtime.server import PolicyServer, ServerConfig
from runtime.server.stats import stats_line
from runtime.server.synthetic import ACTION, DEMO, SyntheticEngine, example_observation, reference_actions
from tests.engine.drifting import DRIFT, STATE, DriftingEngine, drift_case, reference

from .conftest import wait_until


def test_a_healthy_engine_is_checked_between_requests_and_keeps_serving(
    make_server: Callable[..., PolicyServer],
) -> None:
    engine = SyntheticEngine(DEMO)
    obs = example_observation(DEMO, seed=5)
    engine.test_case = TestCase(obs, {ACTION: reference_actions(DEMO, obs)}, {"f32": 1e-4})
    server = make_server(engine, canary_interval_s=0.05)
    wait_until(lambda: server.snapshot().verification.get("checks", 0) >= 3, what="three canary checks")
    with PolicyClient(server.bound_endpoints[0], timeout_s=5.0) as client:
        other = example_observation(DEMO, seed=6)
        np.testing.assert_allclose(client.infer(other).actions, reference_actions(DEMO, other), atol=1e-4)
        v = client.stats().verification
    assert v["failed"] is False and v["failure"] is None and v["interval_s"] == 0.05
    assert v["checks"] >= 3 and v["last_max_abs_err"] < 1e-4 and v["last_check_ms"] > 0
    assert server.verification_failure is None
    assert "canary ok (" in stats_line(server.snapshot())


def test_a_program_that_goes_wrong_while_serving_is_caught_and_no_chunk_follows(
    make_server: Callable[..., PolicyServer], caplog: pytest.LogCaptureFixture
) -> None:
    engine = DriftingEngine(good_calls=3)
    engine.test_case = drift_case()
    obs = {STATE: np.linspace(-1, 1, 6).astype(np.float32)}
    with caplog.at_level(logging.ERROR, logger="runtime.engine.canary"):
        server = make_server(engine, canary_interval_s=0.05)
        with PolicyClient(server.bound_endpoints[0], timeout_s=5.0) as client:
            assert client.infer(obs).actions.shape == (4, 6)  # still right: one call so far
            wait_until(lambda: server.verification_failure is not None, what="the canary to fail")
            with pytest.raises(VerificationFailedError) as info:
                client.infer(obs)
            assert info.value.code == "verification_failed"
            assert "max abs error 0.5 in output 'action'" in info.value.message
            calls = engine.calls
            client.ping()  # the server itself keeps answering
            v = client.stats().verification
            time.sleep(0.3)  # six canary periods
    assert engine.calls == calls  # neither infers nor checks ran the engine after the failure
    assert v["failed"] is True and v["last_max_abs_err"] == pytest.approx(DRIFT, abs=1e-6)
    assert v["failure"] == server.verification_failure
    assert server.snapshot().errors.get("verification_failed") == 1
    assert "VERIFICATION FAILED" in stats_line(server.snapshot())
    failures = [r for r in caplog.records if "verification failed" in r.getMessage()]
    assert len(failures) == 1  # logged once, with the error size
    assert "max abs error 0.5" in failures[0].getMessage()


@pytest.mark.parametrize("value", [-1.0, 0.001, 1e6])
def test_canary_interval_is_validated(value: float) -> None:
    with pytest.raises(ConfigError, match=r"server.canary_interval_s: expected 0 .* got"):
        ServerConfig(canary_interval_s=value)


def test_bench_canary_reports_the_cost_per_check_and_the_delay_it_adds(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from runtime.cli import main

    assert main(["bench", "canary", "--requests", "20", "--checks", "5", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["cost"]["check_ms"]["median"] > 0 and r["cost"]["infer_ms"]["median"] > 0
    assert r["canary_off"]["checks"] == 0 and r["canary_on"]["checks"] >= 1
    assert not r["canary_on"]["failed"]
    assert r["canary_on"]["max_check_ms"] > 0 and "within_one_check" in r


def test_the_canary_state_is_scraped_as_prometheus_metrics(make_server: Callable[..., PolicyServer]) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from runtime.metrics import RuntimeCollector

    engine = DriftingEngine(good_calls=2)
    engine.test_case = drift_case()
    server = make_server(engine, canary_interval_s=0.05)
    wait_until(lambda: server.verification_failure is not None, what="the canary to fail")
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(server.snapshot, lambda: server.info))
    text = generate_latest(registry).decode()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(samples["lerobot_runtime_canary_failed"]) == 1
    assert float(samples["lerobot_runtime_canary_checks_total"]) == 3
    assert float(samples["lerobot_runtime_canary_error"]) == pytest.approx(DRIFT, abs=1e-6)
    assert float(samples["lerobot_runtime_canary_check_milliseconds"]) > 0


def test_a_reload_clears_a_failed_canary_and_checks_the_new_engine(make_server: Callable[..., PolicyServer]) -> None:
    bad = DriftingEngine(good_calls=1)
    bad.test_case = drift_case()
    server = make_server(bad, canary_interval_s=0.05)
    wait_until(lambda: server.verification_failure is not None, what="the canary to fail")
    good = DriftingEngine(good_calls=10**6)
    good.test_case = drift_case()
    server.replace_engine(good)
    assert server.verification_failure is None
    with PolicyClient(server.bound_endpoints[0], timeout_s=5.0) as client:
        state = np.linspace(-1, 1, 6).astype(np.float32)
        np.testing.assert_allclose(client.infer({STATE: state}).actions, reference(state), atol=1e-5)
    wait_until(lambda: server.snapshot().verification.get("checks", 0) >= 2, what="checks of the new engine")
    assert server.verification_failure is None and good.calls >= 3


def test_errors_are_judged_in_the_test_cases_units_as_at_load(make_server: Callable[..., PolicyServer]) -> None:
    """Outputs of tens of degrees: an absolute error of 1e-4 is 3e-6 of a 30-degree scale, well inside
    the f32 tolerance (2e-5) the gate applied in those units; the canary must agree with the gate
    over many periods, and still catch a real drift."""
    from runtime.engine.parity import run_parity

    engine = DriftingEngine(good_calls=10**6)
    state = np.linspace(-1, 1, 6).astype(np.float32)
    scale = (30.0,) * 6
    off = reference(state) + np.float32(1e-4)
    case = TestCase({STATE: state}, {ACTION: off}, {"f32": 2e-5}, {ACTION: scale}, "action std")
    engine.test_case = case
    assert run_parity(engine, case, 2).ok  # the load gate passes it
    server = make_server(engine, canary_interval_s=0.02)
    wait_until(lambda: server.snapshot().verification.get("checks", 0) >= 10, what="ten canary checks")
    v = server.snapshot().verification
    assert v["failed"] is False, v["failure"]
    assert v["units"] == "action std"
    assert v["worst_max_abs_err"] == pytest.approx(1e-4 / 30, rel=0.05)
    assert "action std" in stats_line(server.snapshot())

    drifting = DriftingEngine(good_calls=2)
    drifting.test_case = case
    server.replace_engine(drifting)
    wait_until(lambda: server.verification_failure is not None, what="the canary to catch the drift")
    assert "in units of action std" in str(server.verification_failure)
