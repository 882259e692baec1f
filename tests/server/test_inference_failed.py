"""An engine that fails inside OpenVINO: the client gets ``inference_failed`` with OpenVINO's own reason.

The failing engine is the in-code synthetic policy with one extra OpenVINO model run first: a
Reshape whose target shape comes from the first two joint values. For (2, 3) it runs; for other
values the CPU plugin itself raises (``[cpu]reshape: the shape of input data (6) conflicts with the
reshape pattern (5.7)``), exactly as a real program fails at inference time. Nothing is mocked.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from runtime.client import PolicyClient
from runtime.protocol.errors import InferenceFailedError
from runtime.server import PolicyServer
from runtime.server.synthetic import DEMO, JOINTS, STATE, SyntheticEngine, example_observation, reference_actions

OPENVINO_REASON = "conflicts with the reshape pattern"


class ReshapeFailingEngine(SyntheticEngine):
    def __init__(self) -> None:
        import openvino as ov
        import openvino.opset13 as ops

        super().__init__(DEMO, threads=1)
        state = ops.parameter([len(JOINTS)], ov.Type.f32, name=STATE)
        first_two = ops.slice(state, np.array([0]), np.array([2]), np.array([1]))
        shaped = ops.reshape(state, ops.convert(first_two, "i64"), False)
        model = ov.Model([shaped], [state], "reshape_by_state")
        self._guard = ov.Core().compile_model(model, "CPU").create_infer_request()

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        # the synthetic engine's own error handling is the code under test, so the guard runs inside it
        request = self._request
        guard = self._guard

        class Both:
            def infer(self, inputs: list[np.ndarray], **kwargs: object) -> object:
                guard.infer([inputs[1]])
                return request.infer(inputs, **kwargs)

            def get_output_tensor(self, i: int) -> object:
                return request.get_output_tensor(i)

        self._request = Both()
        try:
            return super().run_validated(arrays)
        finally:
            self._request = request


@pytest.fixture(scope="module")
def failing_engine() -> ReshapeFailingEngine:
    return ReshapeFailingEngine()


def observation(first_two: tuple[float, float]) -> dict[str, np.ndarray]:
    obs = example_observation(DEMO, seed=5)
    obs[STATE] = np.array([*first_two, 0.1, 0.2, 0.3, 0.4], np.float32)
    return obs


def test_openvino_failure_reaches_the_client_with_its_reason(
    make_server: Callable[..., PolicyServer], failing_engine: ReshapeFailingEngine
) -> None:
    server = make_server(failing_engine)
    with PolicyClient(server.bound_endpoints[0], timeout_s=10) as client:
        good = observation((2.0, 3.0))
        np.testing.assert_allclose(client.infer(good).actions, reference_actions(DEMO, good), atol=1e-5)
        with pytest.raises(InferenceFailedError) as info:
            client.infer(observation((5.0, 7.0)))
        assert info.value.code == "inference_failed"
        message = str(info.value)
        assert "OpenVINO inference failed" in message
        assert OPENVINO_REASON in message and "(5.7)" in message  # OpenVINO's words, with the values
        # the same connection keeps working after the failure
        np.testing.assert_allclose(client.infer(good).actions, reference_actions(DEMO, good), atol=1e-5)
        assert client.ping().uptime_s >= 0
    stats = server.snapshot()
    assert stats.errors == {"inference_failed": 1}
    assert stats.latency_ms["total"].count == 2  # only successful inferences enter the latency figures
