"""The parity gate's comparison, on arrays: what passes, what fails, and what the report names."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from runtime.bundle.bundle import TestCase
from runtime.engine.parity import ParityResult, compare, run_parity

TOL = 2e-5


def chunk(seed: int = 0, shape: tuple[int, ...] = (10, 6)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_identical_outputs_pass_with_zero_error() -> None:
    ref = {"action": chunk()}
    r = compare({"action": ref["action"].copy()}, ref, TOL)
    assert r.ok and r.max_abs_err == 0.0 and r.tolerance == TOL


def test_error_at_the_tolerance_passes_and_just_above_fails() -> None:
    ref = np.zeros((4, 6), np.float64)
    at = ref.copy()
    at[2, 3] = 0.5
    assert compare({"action": at}, {"action": ref}, 0.5).ok
    above = ref.copy()
    above[2, 3] = 0.5 + 1e-9
    r = compare({"action": above}, {"action": ref}, 0.5)
    assert not r.ok and r.max_abs_err == pytest.approx(0.5 + 1e-9)


def test_the_report_names_the_worst_element() -> None:
    ref = chunk()
    got = ref.copy()
    got[7, 4] += 0.25
    got[1, 1] -= 0.125  # a smaller error elsewhere must not be reported
    r = compare({"action": got}, {"action": ref}, TOL)
    assert not r.ok
    assert (r.output, r.index) == ("action", (7, 4))
    assert r.got == pytest.approx(float(got[7, 4])) and r.expected == pytest.approx(float(ref[7, 4]))
    assert r.max_abs_err == pytest.approx(0.25, abs=1e-6)
    text = r.describe()
    assert "'action'" in text and "[7, 4]" in text and "tolerance 2e-05" in text
    assert r.to_json() == {
        "max_abs_err": r.max_abs_err,
        "tolerance": TOL,
        "ok": False,
        "output": "action",
        "index": [7, 4],
        "got": r.got,
        "expected": r.expected,
        "units": "absolute",
        "runs": 1,
        "failed_run": 0,
    }


def test_the_worst_output_wins_in_either_order() -> None:
    ref = {"a": chunk(1), "b": chunk(2)}
    got = {"a": ref["a"] + 1e-3, "b": ref["b"] + 1e-1}
    assert compare(got, ref, TOL).output == "b"
    ref = {"b": ref["b"], "a": ref["a"]}
    assert compare(got, ref, TOL).output == "b"
    # a later output with a smaller error does not replace the worst one
    got = {"a": ref["a"] + 1e-1, "b": ref["b"] + 1e-3}
    assert compare(got, {"a": ref["a"], "b": ref["b"]}, TOL).output == "a"


@pytest.mark.parametrize("where", [(0, 0), (9, 5), (3, 2)])
def test_nan_actions_fail_the_gate(where: tuple[int, int]) -> None:
    ref = chunk()
    got = ref.copy()
    got[where] = np.nan
    r = compare({"action": got}, {"action": ref}, TOL)
    assert not r.ok and np.isnan(r.max_abs_err)
    assert r.index == where and np.isnan(r.got)


def test_nan_actions_fail_even_when_a_later_output_matches() -> None:
    # The action output is compared first; a clean output after it must not hide its NaNs.
    ref = {"action": chunk(1), "value": chunk(2, (3,))}
    got = {"action": np.full_like(ref["action"], np.nan), "value": ref["value"].copy()}
    r = compare(got, ref, TOL)
    assert not r.ok and r.output == "action"


def test_nan_in_both_engine_and_reference_fails() -> None:
    ref = chunk()
    ref[0, 0] = np.nan
    assert not compare({"action": ref.copy()}, {"action": ref}, TOL).ok


def test_infinite_actions_fail() -> None:
    ref = chunk()
    got = ref.copy()
    got[2, 2] = np.inf
    r = compare({"action": got}, {"action": ref}, TOL)
    assert not r.ok and r.index == (2, 2)


def test_a_shape_mismatch_fails_and_names_the_output() -> None:
    r = compare({"action": chunk(shape=(10, 5))}, {"action": chunk(shape=(10, 6))}, TOL)
    assert r.ok is False and r.output == "action" and r.max_abs_err == float("inf")
    assert r.tolerance == TOL and r.index == () and np.isnan(r.got) and np.isnan(r.expected)


def test_an_empty_output_does_not_end_the_comparison() -> None:
    empty = np.zeros((0,), np.float32)
    ref = {"empty": empty, "action": chunk()}
    r = compare({"empty": empty, "action": ref["action"] + 1.0}, ref, TOL)
    assert not r.ok and r.output == "action"


def test_equal_errors_report_the_first_output() -> None:
    ref = {"a": np.zeros(3), "b": np.zeros(3)}
    r = compare({"a": np.array([0.0, 0.5, 0.0]), "b": np.array([0.5, 0.0, 0.0])}, ref, TOL)
    assert (r.output, r.index) == ("a", (1,))


def test_no_outputs_to_compare_passes() -> None:
    assert compare({}, {}, TOL) == ParityResult(0.0, TOL, True, "", (), 0.0, 0.0)
    empty = np.zeros((0, 6), np.float32)
    assert compare({"action": empty}, {"action": empty}, TOL).ok


class _Engine:
    def __init__(self, precision: str, outputs: dict[str, np.ndarray]) -> None:
        self.info = SimpleNamespace(precision=precision, device="CPU")
        self.manifest = SimpleNamespace(programs={"CPU": SimpleNamespace(precision="f32")})
        self.outputs = outputs
        self.seen: list[dict[str, np.ndarray]] = []

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.seen.append(inputs)
        return self.outputs


@pytest.mark.parametrize(("precision", "expected_tol"), [("f32", 2e-5), ("bf16", 0.075), ("f16", 2e-5)])
def test_run_parity_uses_the_tolerance_of_the_precision_that_runs(precision: str, expected_tol: float) -> None:
    ref = chunk()
    case = TestCase({"obs": chunk(3, (6,))}, {"action": ref}, {"f32": 2e-5, "bf16": 0.075})
    engine = _Engine(precision, {"action": ref + 0.01})
    r = run_parity(engine, case)  # type: ignore[arg-type]
    # the engine got the case's inputs (as private copies: a program may write into its input buffers)
    assert len(engine.seen) == 1 and engine.seen[0].keys() == case.inputs.keys()
    assert all(np.array_equal(engine.seen[0][k], v) for k, v in case.inputs.items())
    assert r.tolerance == expected_tol
    assert r.ok is (expected_tol > 0.011)


def test_run_parity_defaults_to_the_f32_tolerance() -> None:
    case = TestCase({}, {"action": chunk()}, {})
    r = run_parity(_Engine("f32", {"action": chunk() + 1e-5}), case)  # type: ignore[arg-type]
    assert r.tolerance == 2e-5 and r.ok
    # a precision the bundle has no tolerance for falls back to the bundle's own f32 tolerance
    case = TestCase({}, {"action": chunk()}, {"f32": 1e-3})
    assert run_parity(_Engine("f16", {"action": chunk()}), case).tolerance == 1e-3  # type: ignore[arg-type]
