"""A real OpenVINO engine built in code, for the server's tests and ``bench serve``.

The graph has the shape of an ACT-style policy: a uint8 camera image (block-averaged) and the joint
state go through one dense layer to a ``[chunk, joints]`` action chunk. It is compiled for the
CPU plugin like any bundle program; :func:`reference_actions` recomputes it with numpy so tests can
check every returned chunk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from drivers.calibration import SO101_JOINTS
from runtime.bundle.manifest import Manifest, ProgramEntry, TensorSpec, TestCaseEntry
from runtime.engine.base import Engine, EngineInfo
from runtime.errors import InferenceError

IMAGE = "observation.images.front"
STATE = "observation.state"
ACTION = "action"
JOINTS = SO101_JOINTS


@dataclass(frozen=True)
class SyntheticPolicy:
    image_shape: tuple[int, int, int]
    chunk: int = 100
    block: int = 8  # image pooling block (height and width must divide by it)
    seed: int = 0

    @property
    def features(self) -> int:
        h, w, c = self.image_shape
        return (h // self.block) * (w // self.block) * c + len(JOINTS)

    def weights(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        w = (rng.standard_normal((self.features, self.chunk * len(JOINTS))) / np.sqrt(self.features)).astype(
            np.float32
        )
        b = (0.1 * rng.standard_normal(self.chunk * len(JOINTS))).astype(np.float32)
        return w, b


DEMO = SyntheticPolicy((96, 128, 3))
ACT = SyntheticPolicy((480, 640, 3), block=16)


def _features(policy: SyntheticPolicy, image: np.ndarray, state: np.ndarray) -> np.ndarray:
    h, w, c = policy.image_shape
    k = policy.block
    pooled = image.astype(np.float32).reshape(h // k, k, w // k, k, c).mean(axis=(1, 3)) / 255.0
    return np.concatenate([pooled.reshape(-1), state.astype(np.float32)])


def reference_actions(policy: SyntheticPolicy, observation: dict[str, np.ndarray]) -> np.ndarray:
    w, b = policy.weights()
    x = _features(policy, observation[IMAGE], observation[STATE])
    out: np.ndarray = np.tanh(x @ w + b).reshape(policy.chunk, len(JOINTS)).astype(np.float32)
    return out


def example_observation(policy: SyntheticPolicy, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        IMAGE: rng.integers(0, 256, size=policy.image_shape, dtype=np.uint8),
        STATE: rng.standard_normal(len(JOINTS)).astype(np.float32),
    }


def synthetic_manifest(policy: SyntheticPolicy, ov_version: str) -> Manifest:
    zeros = "0" * 64
    return Manifest(
        policy_name=f"synthetic-{policy.image_shape[0]}x{policy.image_shape[1]}",
        inputs=(
            TensorSpec(IMAGE, "uint8", policy.image_shape, "image"),
            TensorSpec(STATE, "float32", (len(JOINTS),), "state"),
        ),
        outputs=(TensorSpec(ACTION, "float32", (policy.chunk, len(JOINTS)), "action"),),
        action_output=ACTION,
        chunk_length=policy.chunk,
        action_names=JOINTS,
        control_rate_hz=30.0,
        programs={"CPU": ProgramEntry("CPU", "synthetic.pte", "f32", zeros, "full", ov_version)},
        test_case=TestCaseEntry("test_case.npz", zeros),
        description="built in code by runtime.server.synthetic",
    )


class SyntheticEngine(Engine):
    """An :class:`Engine` over an OpenVINO model built with the opset API and compiled for CPU."""

    def __init__(self, policy: SyntheticPolicy = DEMO, threads: int = 0) -> None:
        import openvino as ov
        import openvino.opset13 as ops

        h, w, c = policy.image_shape
        k = policy.block
        image = ops.parameter([h, w, c], ov.Type.u8, name=IMAGE)
        state = ops.parameter([len(JOINTS)], ov.Type.f32, name=STATE)

        def const(values: list[int]) -> object:
            return ops.constant(np.array(values, dtype=np.int64))

        x = ops.convert(image, "f32")
        x = ops.reshape(x, const([h // k, k, w // k, k, c]), False)
        x = ops.reduce_mean(x, const([1, 3]), False)
        x = ops.multiply(ops.reshape(x, const([1, -1]), False), ops.constant(np.float32(1 / 255.0)))
        s = ops.reshape(state, const([1, len(JOINTS)]), False)
        weights, bias = policy.weights()
        y = ops.matmul(ops.concat([x, s], 1), ops.constant(weights), False, False)
        y = ops.tanh(ops.add(y, ops.constant(bias.reshape(1, -1))))
        y = ops.reshape(y, const([policy.chunk, len(JOINTS)]), False)
        y.output(0).get_tensor().set_names({ACTION})
        model = ov.Model([y], [image, state], "synthetic_policy")
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        n_threads = threads or len(cpus)
        # f32 so chunks match the numpy reference; the CPU plugin would pick bf16 where it can.
        compiled = ov.Core().compile_model(
            model, "CPU", {"INFERENCE_NUM_THREADS": n_threads, "INFERENCE_PRECISION_HINT": "f32"}
        )
        self._request = compiled.create_infer_request()
        version = ov.get_version()
        info = EngineInfo(
            engine="openvino",
            device="CPU",
            precision="f32",
            threads=n_threads,
            cpus=cpus,
            bundle="(synthetic)",
            program="(in memory)",
            openvino_version=version,
        )
        super().__init__(synthetic_manifest(policy, version), info)
        self.policy = policy

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        try:
            self._request.infer(arrays, share_inputs=True, share_outputs=True)
        except RuntimeError as e:
            raise InferenceError("OpenVINO inference failed", backend_reason=str(e)) from e
        return {ACTION: self._request.get_output_tensor(0).data}
