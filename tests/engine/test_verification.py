"""The parity gate's repeated replay, non-finite outputs, and the serving canary's own logic."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.engine.canary import Canary
from runtime.engine.config import EngineConfig
from runtime.engine.loader import LoadReport, load_engine
from runtime.engine.parity import compare, run_parity
from runtime.errors import ConfigError, ParityError
from tests.engine.arithmetic import executorch_options
from tests.engine.drifting import ACTION, DRIFT, DriftingEngine, drift_case

torch = pytest.importorskip("torch")

DRIFT_BY = 0.5  # how far the exported drifting program goes wrong (below)


def _error_in(message: str) -> float:
    """The error a parity or canary message reports, as a number (its text depends on the CPU's rounding)."""
    import re

    found = re.search(r"max abs error (\S+) ", message)
    assert found, message
    return float(found.group(1))


def test_a_nan_in_one_output_fails_parity_whatever_the_other_outputs_say() -> None:
    reference = {"action": np.ones((2, 3), np.float32), "extra": np.zeros(4, np.float32)}
    got = {"action": reference["action"].copy(), "extra": np.full(4, 1e-7, np.float32)}
    got["action"][1, 2] = np.nan
    result = compare(got, reference, 2e-5)
    assert not result.ok
    assert (result.output, result.index) == ("action", (1, 2))
    assert "non-finite value nan in output 'action' at [1, 2]" in result.describe()


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_output_fails_even_where_the_reference_has_one(bad: float) -> None:
    reference = {"action": np.array([[0.5, bad]], np.float32)}
    got = {"action": np.array([[0.5, bad]], np.float32)}
    result = compare(got, reference, 2e-5)
    assert not result.ok and not np.isfinite(result.max_abs_err) and result.index == (0, 1)


def test_finite_outputs_within_tolerance_pass() -> None:
    reference = {"action": np.ones((2, 3), np.float32), "extra": np.zeros(4, np.float32)}
    got = {"action": reference["action"] + 1e-6, "extra": reference["extra"] - 3e-6}
    result = compare(got, reference, 2e-5)
    assert result.ok and result.output == "extra" and result.max_abs_err == pytest.approx(3e-6)


def test_one_replay_misses_a_program_that_goes_wrong_later_and_repeated_replays_catch_it() -> None:
    case = drift_case()
    assert run_parity(DriftingEngine(good_calls=2), case, runs=1).ok  # what a single replay sees
    engine = DriftingEngine(good_calls=2)
    result = run_parity(engine, case, runs=16)
    assert not result.ok
    assert (result.failed_run, result.runs, engine.calls) == (3, 16, 3)  # stops at the first bad replay
    assert result.max_abs_err == pytest.approx(DRIFT, abs=1e-6)
    assert "on replay 3 of 16" in result.describe()
    assert result.to_json()["failed_run"] == 3


def test_repeated_replays_of_a_steady_program_pass_and_report_the_worst() -> None:
    result = run_parity(DriftingEngine(good_calls=100), drift_case(), runs=16)
    assert result.ok and result.runs == 16 and result.failed_run == 0
    assert "over 16 replays" in result.describe()


def test_parity_runs_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"engine.parity_runs: expected >= 1 .* got 0"):
        EngineConfig(parity_runs=0)


def test_the_loader_replays_the_case_parity_runs_times(demo_bundle: Path) -> None:
    report = LoadReport()
    engine = load_engine(
        EngineConfig(bundle=str(demo_bundle), engine="openvino", warmup_runs=0, parity_runs=5), report=report
    )
    assert report.parity is not None and report.parity.ok and report.parity.runs == 5
    assert engine.test_case is not None  # handed on to the serving canary
    engine.close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_canary_is_due_after_its_period_when_idle_and_a_period_later_under_load() -> None:
    clock = FakeClock()
    canary = Canary(drift_case(), 1.0, clock=clock)
    assert not canary.due(idle=True) and canary.seconds_until_due() == pytest.approx(1.0)
    clock.now += 1.0
    assert canary.due(idle=True) and not canary.due(idle=False)
    clock.now += 1.0  # a whole period late: a stream of requests may not starve it
    assert canary.due(idle=False)
    assert canary.check(DriftingEngine(good_calls=100))
    assert not canary.due(idle=True) and canary.seconds_until_due() == pytest.approx(1.0)


def test_the_canary_catches_a_program_that_goes_wrong_later_logs_once_and_stays_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    engine = DriftingEngine(good_calls=3)
    canary = Canary(drift_case(), 0.5, clock=clock)
    with caplog.at_level(logging.ERROR, logger="runtime.engine.canary"):
        assert [canary.check(engine) for _ in range(5)] == [True, True, True, False, False]
    assert engine.calls == 4  # no inference once failed
    state = canary.state
    assert state.failed and state.checks == 4
    assert state.last_max_abs_err == pytest.approx(DRIFT, abs=1e-6) and state.tolerance == 2e-5
    assert canary.failure is not None and "canary check 4" in canary.failure
    assert "max abs error 0.5 in output 'action'" in canary.failure
    assert canary.seconds_until_due() is None and not canary.due(idle=True)
    assert [r.getMessage() for r in caplog.records] == [canary.failure]
    assert state.to_wire()["failed"] is True


def test_the_canary_replays_private_copies_of_the_inputs() -> None:
    case = drift_case()
    pristine = case.inputs["observation.state"].copy()
    engine = DriftingEngine(good_calls=100)
    real = engine.run_validated

    def scribble(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        out = real(arrays)
        arrays[0][:] = 7.0  # a program that writes into its input buffer
        return out

    engine.run_validated = scribble  # type: ignore[method-assign]
    canary = Canary(case, 1.0)
    assert canary.check(engine) and canary.check(engine)
    np.testing.assert_array_equal(case.inputs["observation.state"], pristine)
    assert canary.state.checks == 2 and not canary.state.failed
    assert ACTION in case.outputs


def test_an_engine_that_raises_on_its_test_case_fails_the_canary() -> None:
    engine = DriftingEngine(good_calls=100)

    def broken(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        raise RuntimeError("device lost")

    engine.run_validated = broken  # type: ignore[method-assign]
    canary = Canary(drift_case(), 1.0)
    assert not canary.check(engine)
    assert canary.state.last_max_abs_err is None
    assert canary.failure is not None and "the test case no longer runs: RuntimeError: device lost" in canary.failure


class Drift(torch.nn.Module):  # type: ignore[misc]
    """A program that carries state (a buffer it adds 1 to on each call) and is wrong by DRIFT_BY from
    its third call on: ExecuTorch keeps the buffer, OpenVINO computes the rest."""

    @staticmethod
    def factory() -> tuple[Any, dict[str, Any]]:
        return Drift(), {"observation.state": torch.rand(6)}

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(6, 12)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1.0)
        return self.head(state).reshape(2, 6) + DRIFT_BY * torch.clamp(self.calls - 2.0, 0.0, 1.0)


@pytest.fixture(scope="module")
def drift_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The drifting program (Drift) as a bundle."""
    from runtime.export.export import export_bundle

    path = tmp_path_factory.mktemp("drift") / "bundle"
    with warnings.catch_warnings():
        # ExecuTorch warns that a mutated buffer starts from an unspecified state (zeros in practice):
        # the counter only has to count
        warnings.filterwarnings("ignore", message="Mutation on a buffer")
        # unproved: the export's own gate refuses it (below)
        export_bundle(Drift.factory, path, action_names=tuple("abcdef"), prove_on_export=False)
    return path


@pytest.mark.export
def test_the_export_refuses_a_program_that_goes_wrong_later_and_writes_nothing(tmp_path: Path) -> None:
    from runtime.errors import ExportError
    from runtime.export.export import export_bundle

    with warnings.catch_warnings(), pytest.raises(ExportError) as err:
        warnings.filterwarnings("ignore", message="Mutation on a buffer")
        export_bundle(Drift.factory, tmp_path / "b", action_names=tuple("abcdef"))
    said = str(err.value)
    assert said.startswith("the exported program fails its own load gate on this machine: max abs error ")
    assert said.endswith(
        "its answers change from one inference to the next (right before replay 3), state carried between "
        "inferences that no tolerance makes right; nothing was written"
    )
    assert _error_in(said) == pytest.approx(DRIFT_BY, abs=0.01)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.export
def test_an_exported_program_that_goes_wrong_later_passes_one_replay_and_fails_the_gate(drift_bundle: Path) -> None:
    report = LoadReport()
    options = executorch_options(drift_bundle)  # ExecuTorch keeps the buffer: this CPU's arithmetic, accepted
    config = EngineConfig(bundle=str(drift_bundle), warmup_runs=0, parity_runs=1, **options)
    engine = load_engine(config, report=report)
    assert report.parity is not None and report.parity.ok  # what a single replay at load saw
    engine.close()
    with pytest.raises(ParityError, match=r"max abs error (\S+) .* on replay \d+ of 16") as err:
        load_engine(EngineConfig(bundle=str(drift_bundle), warmup_runs=0, **options))
    assert _error_in(str(err.value)) == pytest.approx(DRIFT_BY, abs=0.01)  # 0.5, give or take bf16 rounding


@pytest.mark.export
def test_the_canary_catches_it_while_serving_when_the_gate_was_set_to_one_replay(
    drift_bundle: Path, tmp_path: Path
) -> None:
    from runtime.client import PolicyClient
    from runtime.protocol.errors import VerificationFailedError
    from runtime.server import PolicyServer, ServerConfig
    from tests.server.conftest import wait_until

    config = EngineConfig(bundle=str(drift_bundle), warmup_runs=0, parity_runs=1, **executorch_options(drift_bundle))
    server = PolicyServer(
        lambda: load_engine(config),
        ServerConfig(endpoints=(f"ipc://{tmp_path}/p.sock",), canary_interval_s=0.05),
    )
    server.start()
    try:
        wait_until(lambda: server.verification_failure is not None, what="the canary to fail")
        assert "in output 'action'" in str(server.verification_failure)
        assert _error_in(str(server.verification_failure)) == pytest.approx(DRIFT_BY, abs=0.01)
        with (
            PolicyClient(server.bound_endpoints[0], timeout_s=5.0) as client,
            pytest.raises(VerificationFailedError),
        ):
            client.infer({"observation.state": np.zeros(6, np.float32)})
    finally:
        server.stop(1.0)
