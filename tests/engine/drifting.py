"""A real OpenVINO program that is right for its first calls and wrong after: state carried between
inferences (a ReadValue/Assign variable counting calls), the shape of OpenVINO's silent failures that
a single parity replay cannot see."""

from __future__ import annotations

import numpy as np

from runtime.bundle.bundle import TestCase
from runtime.bundle.manifest import Manifest, ProgramEntry, TensorSpec, TestCaseEntry
from runtime.engine.base import Engine, EngineInfo
from runtime.server.synthetic import JOINTS

STATE = "observation.state"
ACTION = "action"
CHUNK = 4
DRIFT = 0.5  # how far off every action value is once the program goes wrong


def _weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((len(JOINTS), CHUNK * len(JOINTS))).astype(np.float32) / 3
    b = rng.standard_normal(CHUNK * len(JOINTS)).astype(np.float32) / 10
    return w, b


def reference(state: np.ndarray) -> np.ndarray:
    w, b = _weights()
    out: np.ndarray = np.tanh(state @ w + b).reshape(CHUNK, len(JOINTS)).astype(np.float32)
    return out


def drift_case(seed: int = 0) -> TestCase:
    state = np.random.default_rng(seed).standard_normal(len(JOINTS)).astype(np.float32)
    return TestCase({STATE: state}, {ACTION: reference(state)}, {"f32": 2e-5})


class DriftingEngine(Engine):
    """Right on calls 1..``good_calls``, every value ``DRIFT`` off from then on, no error raised."""

    def __init__(self, good_calls: int) -> None:
        import openvino as ov
        import openvino.opset13 as ops
        from openvino.op.util import Variable, VariableInfo

        x = ops.parameter([len(JOINTS)], ov.Type.f32, name=STATE)
        info = VariableInfo()
        info.data_shape = ov.PartialShape([1])
        info.data_type = ov.Type.f32
        info.variable_id = "calls"
        var = Variable(info)
        calls = ops.read_value(ops.constant(np.zeros(1, np.float32)), var)
        calls = ops.add(calls, ops.constant(np.ones(1, np.float32)))
        assign = ops.assign(calls, var)
        # 0 while calls <= good_calls, DRIFT after
        wrong = ops.clamp(ops.subtract(calls, ops.constant(np.float32(good_calls))), 0.0, 1.0)
        w, b = _weights()
        y = ops.tanh(ops.add(ops.matmul(ops.reshape(x, [1, -1], False), ops.constant(w), False, False), b))
        y = ops.add(y, ops.multiply(wrong, ops.constant(np.float32(DRIFT))))
        y = ops.reshape(y, [CHUNK, len(JOINTS)], False)
        y.output(0).get_tensor().set_names({ACTION})
        model = ov.Model([y.output(0)], [assign], [x], [var], "drifting_policy")
        compiled = ov.Core().compile_model(
            model, "CPU", {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}
        )
        self._request = compiled.create_infer_request()
        zeros = "0" * 64
        manifest = Manifest(
            policy_name="drifting",
            inputs=(TensorSpec(STATE, "float32", (len(JOINTS),), "state"),),
            outputs=(TensorSpec(ACTION, "float32", (CHUNK, len(JOINTS)), "action"),),
            action_output=ACTION,
            chunk_length=CHUNK,
            action_names=JOINTS,
            control_rate_hz=30.0,
            programs={"CPU": ProgramEntry("CPU", "drifting.pte", "f32", zeros, "full", ov.get_version())},
            test_case=TestCaseEntry("test_case.npz", zeros),
        )
        info_ = EngineInfo("openvino", "CPU", "f32", 1, (0,), "(drifting)", "(in memory)", ov.get_version())
        super().__init__(manifest, info_)
        self.calls = 0

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        self._request.infer(arrays)
        return {ACTION: np.array(self._request.get_output_tensor(0).data, copy=True)}
