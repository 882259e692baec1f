"""tools.perf_compare: two small OpenVINO models profiled in turns, their layer types side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")


def _model(tmp_path: Path, name: str, *, matmul: bool) -> Path:
    from openvino import opset13 as ops

    x = ops.parameter([4, 8], np.float32, name="x")
    y = ops.relu(x)
    if matmul:
        y = ops.matmul(y, ops.constant(np.ones((8, 8), np.float32)), False, False)
    path = tmp_path / f"{name}.xml"
    ov.save_model(ov.Model([y], [x]), str(path))
    return path


def test_each_program_gets_its_nodes_and_the_table_sums_them_by_layer_type(tmp_path: Path) -> None:
    from tools.perf_compare import layer_type_table, profile

    case = tmp_path / "test_case.npz"
    np.savez(case, **{"input/x": np.ones((4, 8), np.float32), "output/y": np.zeros(1, np.float32)})
    a, b = _model(tmp_path, "a", matmul=False), _model(tmp_path, "b", matmul=True)
    results = profile([a, b], case, 3, {"PERF_COUNT": True, "INFERENCE_NUM_THREADS": 1})

    assert [r["program"] for r in results] == [str(a), str(b)]
    assert all(len(r["wall_ms"]) == 3 for r in results)
    kinds = [{n["layer_type"] for n in r["nodes"]} for r in results]
    assert "FullyConnected" not in kinds[0] and "FullyConnected" in kinds[1]  # the MatMul on a constant
    assert all(n["precision"] for r in results for n in r["nodes"])
    table = layer_type_table(results, min_ms=0.0)
    assert table.splitlines()[0].split()[:2] == ["layer", "type"]
    assert any(line.startswith("FullyConnected") for line in table.splitlines())
    assert table.splitlines()[-1].startswith("wall median")


def test_a_test_case_that_does_not_fit_the_program_is_refused_naming_both(tmp_path: Path) -> None:
    from tools.perf_compare import profile

    case = tmp_path / "test_case.npz"
    np.savez(case, **{"input/x": np.ones((3, 8), np.float32)})
    with pytest.raises(SystemExit, match=r"a\.xml: takes inputs .*the test case has \['float32\[3, 8\]'\]"):
        profile([_model(tmp_path, "a", matmul=False)], case, 1, {})
