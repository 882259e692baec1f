"""The engine seam on a stand-in engine: what ``infer`` hands the program, what ``info`` says on the
wire, and that a ``with`` block releases the engine."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.bundle.manifest import Manifest, TensorSpec
from runtime.engine.base import Engine, EngineInfo
from runtime.errors import InputValidationError
from tests.bundle.manifests import small_manifest

INFO = EngineInfo("openvino", "CPU", "bf16", 2, (1, 3), "/b", "program_cpu.pte", "2025.4.1", "bf16")


def manifest() -> Manifest:
    return small_manifest(
        inputs=(
            TensorSpec("observation.images.front", "uint8", (2, 3, 3), "image"),
            TensorSpec("observation.state", "float32", (3,), "state"),
        )
    )


class Recording(Engine):
    def __init__(self) -> None:
        super().__init__(manifest(), INFO)
        self.runs: list[list[np.ndarray]] = []
        self.closed = 0

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        self.runs.append(arrays)
        return {"action": np.full((2, 3), float(arrays[1].sum()), np.float32)}

    def close(self) -> None:
        self.closed += 1


def test_info_on_the_wire_has_every_field_and_the_cpus_as_a_list() -> None:
    assert INFO.to_json() == {
        "engine": "openvino",
        "device": "CPU",
        "precision": "bf16",
        "threads": 2,
        "cpus": [1, 3],
        "bundle": "/b",
        "program": "program_cpu.pte",
        "openvino_version": "2025.4.1",
        "arithmetic": "bf16",
    }
    assert EngineInfo("executorch", "CPU", "f32", 1, (0,), "b", "p", "v").arithmetic == ""


def test_infer_hands_the_program_its_inputs_in_manifest_order() -> None:
    engine = Recording()
    assert engine.test_case is None  # set only once the parity gate passed
    image = np.zeros((2, 3, 3), np.uint8)
    state = np.array([1.0, 2.0, 3.5], np.float32)
    out = engine.infer({"observation.state": state, "observation.images.front": image})
    np.testing.assert_array_equal(out["action"], np.full((2, 3), 6.5, np.float32))
    [(first, second)] = engine.runs
    assert first.dtype == np.uint8 and first.shape == (2, 3, 3)
    np.testing.assert_array_equal(second, state)


def test_infer_refuses_a_bad_input_by_name_without_running() -> None:
    engine = Recording()
    with pytest.raises(InputValidationError) as e:
        engine.infer({"observation.images.front": np.zeros((2, 3, 3), np.uint8)})
    assert e.value.field == "observation.state" and e.value.received == "nothing"
    assert engine.runs == []


def test_a_with_block_closes_the_engine_once_also_on_error() -> None:
    engine = Recording()
    with engine as entered:
        assert entered is engine
        assert engine.closed == 0
    assert engine.closed == 1
    other = Recording()
    with pytest.raises(RuntimeError), other:
        raise RuntimeError("inference failed")
    assert other.closed == 1


def test_an_engine_without_native_handles_closes_quietly() -> None:
    class Plain(Engine):
        def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
            return {}

    with Plain(manifest(), INFO) as engine:
        assert engine.info is INFO and engine.manifest.policy_name == "stand-in"
    engine.close()
