"""An export proves its bundle: the tolerance it derives from what it measured, and what it still refuses.

The derivation is tested on the gate's reports; the real gate (a child running the daemon's load) on
small real exports: a right program gets a measured tolerance, a program that silently computes 1e-2
off its reference is refused at export, and at load on a bundle that was not proved.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.bundle.manifest import DEFAULT_TOLERANCE, F32_CEILING, F32_MARGIN
from runtime.errors import ExportError, ParityError
from runtime.export.prove import derive
from tests.export.test_export_rules import gate_found

FLOOR = DEFAULT_TOLERANCE["f32"]


def test_the_f32_tolerance_is_the_margin_times_the_larger_spread_never_below_the_floor() -> None:
    tol, basis = derive(gate_found(2.26e-5), 2.6e-6, {}, "lerobot 0.6.1")
    assert tol["f32"] == pytest.approx(F32_MARGIN * 2.26e-5)
    assert {k: tol[k] for k in ("bf16", "f16", "int8")} == {k: DEFAULT_TOLERANCE[k] for k in ("bf16", "f16", "int8")}
    b = basis["f32"]
    assert (b.how, b.reference_spread, b.lowered_error, b.traced_by) == ("measured", 2.6e-6, 2.26e-5, "lerobot 0.6.1")
    assert b.lowered_by == "openvino engine at f32 on CPU (avx2)"
    # the reference's own rounding can be the larger one; a tiny model's spread gives the floor
    assert derive(gate_found(1e-6), 3e-5, {}, "")[0]["f32"] == pytest.approx(F32_MARGIN * 3e-5)
    assert derive(gate_found(1e-7), 4e-8, {}, "")[0]["f32"] == FLOOR
    assert derive(gate_found(1e-7), None, {}, "")[0]["f32"] == FLOOR  # no f64 run: the lowered error alone


def test_a_gate_that_ran_below_f32_measures_only_the_references_spread() -> None:
    tol, basis = derive(gate_found(0.02, precision="bf16"), 1e-5, {}, "")
    assert tol["f32"] == pytest.approx(F32_MARGIN * 1e-5) and tol["bf16"] == DEFAULT_TOLERANCE["bf16"]
    assert basis["f32"].lowered_error is None and basis["f32"].lowered_by == ""


def test_a_miss_where_the_executorch_engine_ran_an_f32_program_below_f32_is_said_not_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ExecuTorch's backend passes OpenVINO no precision: on a CPU with native bf16 it computes an f32
    program at bf16, which the daemon refuses by default; the export of the f32 program stands."""
    with caplog.at_level(logging.WARNING, logger="runtime.export.prove"):
        tol, basis = derive(gate_found(0.5, precision="bf16", engine="executorch"), 1e-6, {}, "")
    assert tol["f32"] == FLOOR and basis["f32"].lowered_error is None
    assert [r.getMessage() for r in caplog.records] == [
        "the executorch engine runs this f32 program at bf16 on this machine (ExecuTorch's OpenVINO backend passes "
        "no precision), where it misses its reference: max abs error 0.5 over 16 replays; the daemon here refuses "
        "to serve it at bf16 unless engine.accept_lower_arithmetic, and would then refuse it at the load gate"
    ]
    # the openvino engine at the precision asked is the bundle's own computation: a miss is refused
    with pytest.raises(ExportError, match="fails its own load gate on this machine"):
        derive(gate_found(0.5, precision="bf16", program="bf16"), 1e-6, {}, "")
    with pytest.raises(ExportError, match="fails its own load gate on this machine"):
        derive(gate_found(0.5, precision="bf16", engine="executorch", program="bf16"), 1e-6, {}, "")


def test_a_given_tolerance_wins_and_what_was_measured_is_still_recorded() -> None:
    tol, basis = derive(gate_found(5e-5), 1e-6, {"f32": 1e-4}, "")
    assert tol["f32"] == 1e-4
    assert (basis["f32"].how, basis["f32"].lowered_error, basis["f32"].reference_spread) == ("given", 5e-5, 1e-6)
    with pytest.raises(ExportError, match=r"fails its own load gate on this machine: .*--tolerance f32=0.0004"):
        derive(gate_found(2e-4), 1e-6, {"f32": 1e-4}, "")


@pytest.mark.parametrize("error", [1e-2, 0.3])
def test_a_silent_wrong_result_is_no_rounding_and_is_refused_with_the_one_remedy(error: float) -> None:
    with pytest.raises(ExportError) as e:
        derive(gate_found(error), 1e-6, {}, "")
    said = str(e.value)
    assert said.startswith(
        "the program does not reproduce its reference closely enough to be f32 rounding: the lowered program on "
        f"this machine differs by {error:.3g} in units of the test case's scale, and 4 x that is over the 0.001 "
    )
    assert said.endswith(f"export it with --tolerance f32={F32_MARGIN * error:.2g}")
    # the ceiling keeps an order of magnitude to the smallest such error
    assert F32_CEILING * 10 <= 1e-2


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("given", [{}, {"f32": 1e-4}])
def test_a_non_finite_output_is_refused_without_a_tolerance_to_offer(bad: float, given: dict[str, float]) -> None:
    with pytest.raises(ExportError, match=r"non-finite value: it cannot be served$"):
        derive(gate_found(bad), 1e-6, given, "")


# --- the real gate, on small real exports ------------------------------------------------------


torch = pytest.importorskip("torch")


class OffInTheProgram(torch.nn.Module):  # type: ignore[misc]
    """Computes ``off`` more in its exported program than eagerly: a program that silently misses its
    reference by that much, as OpenVINO's known wrong results do."""

    def __init__(self, off: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(6, 18)
        self.off = off

    def forward(self, state: Any) -> Any:
        out = self.head(state).reshape(3, 6)
        return out + self.off if torch.compiler.is_exporting() else out


def _factory(off: float) -> Any:
    return lambda: (OffInTheProgram(off).eval(), {"observation.state": torch.linspace(-1, 1, 6)})


@pytest.mark.export
def test_a_right_program_gets_a_measured_tolerance_and_check_says_where_it_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.cli import main
    from runtime.export.export import export_bundle

    bundle = export_bundle(_factory(0.0), tmp_path / "b", action_names=tuple("abcdef"))
    case = json.loads((bundle.path / "manifest.json").read_text())["test_case"]
    basis = case["tolerance_basis"]["f32"]
    assert basis["how"] == "measured" and basis["margin"] == F32_MARGIN and basis["floor"] == FLOOR
    assert basis["reference_spread"] < 1e-6 and basis["lowered_error"] < 1e-5
    assert case["tolerance"]["f32"] == max(FLOOR, F32_MARGIN * max(basis["reference_spread"], basis["lowered_error"]))
    assert main(["check", str(bundle.path), "--engine", "openvino"]) == 0
    said = capsys.readouterr().out
    assert (
        f"tolerance (f32): {case['tolerance']['f32']:.3g}, measured at export: 4 x the larger of the reference" in said
    )


@pytest.mark.export
def test_a_program_off_its_reference_by_1e_2_is_refused_at_export_and_nothing_is_written(tmp_path: Path) -> None:
    from runtime.export.export import export_bundle

    with pytest.raises(ExportError) as e:
        export_bundle(_factory(1e-2), tmp_path / "b", action_names=tuple("abcdef"))
    assert "the lowered program on this machine differs by 0.01 in units of the test case's scale" in str(e.value)
    assert not (tmp_path / "b").exists() and list(tmp_path.iterdir()) == []


@pytest.mark.export
def test_a_bundle_with_a_measured_tolerance_still_refuses_a_wrong_result_of_1e_2_at_load(tmp_path: Path) -> None:
    """The bundle written unproved, with the largest tolerance a measurement can give: the daemon's gate
    still refuses the program."""
    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import load_engine
    from runtime.export.export import export_bundle

    export_bundle(
        _factory(1e-2),
        tmp_path / "b",
        action_names=tuple("abcdef"),
        prove_on_export=False,
        tolerance={"f32": F32_CEILING},
    )
    with pytest.raises(ParityError, match=r"max abs error 0.01 .*refusing|refusing to serve: max abs error 0.01"):
        load_engine(EngineConfig(bundle=str(tmp_path / "b"), engine="openvino", warmup_runs=0))
    scale = np.asarray(json.loads((tmp_path / "b" / "manifest.json").read_text())["test_case"]["scale"]["action"])
    assert (scale == 1.0).all()  # outputs below 1: the error is in absolute units, as said
