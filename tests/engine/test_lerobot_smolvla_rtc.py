"""LeRobot SmolVLA with real-time chunking: exported, served and proved against LeRobot's own RTC path.

The reference is LeRobot's inference as its RTC robot loop runs it: the observation and the task
through the preprocessor, then ``predict_action_chunk`` with the same flow noise and with
``inference_delay=``, ``prev_chunk_left_over=`` (the leftover as LeRobot's action queue keeps it:
normalised, unpadded) and ``execution_horizon=``, then the postprocessor. The program takes the
leftover in the wire's units and the prefix weights the server computes. The checkpoint is the tiny
one with ``rtc_config`` enabled in its config.json (horizon 6 of its 10 steps, guidance cap 8).
Errors are in normalised units (the action's std).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.export.lerobot import lerobot_available
from tests.engine.arithmetic import bundle_tolerance
from tests.engine.conftest import SMOLVLA_RTC

REASON = lerobot_available() or (
    None
    if importlib.util.find_spec("transformers") and importlib.util.find_spec("num2words")
    else "SmolVLA needs transformers and num2words (the smolvla extra)"
)
pytestmark = [
    pytest.mark.export,
    pytest.mark.skipif(REASON is not None, reason=f"needs LeRobot's SmolVLA: {REASON}"),
    # the first test exports the bundle (a minute or two, more on two shared cores)
    pytest.mark.timeout(900),
]

IMAGE, STATE, NOISE = "observation.images.front", "observation.state", "noise"
TOKENS, MASK = "observation.language.tokens", "observation.language.attention_mask"
PREFIX, WEIGHTS, CAP = "rtc.prefix", "rtc.prefix_weights", "rtc.max_guidance_weight"
CHUNK, STEPS, MAX_ACTION, JOINTS = 10, 5, 32, 6
HORIZON, GUIDANCE = SMOLVLA_RTC["execution_horizon"], SMOLVLA_RTC["max_guidance_weight"]
TASK = "Pick up the red cube and place it in the box."
# (leftover steps, delay): a leftover shorter than the horizon caps it, one of the whole chunk does not;
# a delay of 0 still guides softly, one past the horizon freezes every guided step
CASES = ((6, 2), (3, 0), (CHUNK, 4), (1, 1), (8, 7))


class LeRobotRTC:
    """LeRobot's own RTC inference on the checkpoint."""

    def __init__(self, checkpoint: Path) -> None:
        from runtime.export.lerobot import load_checkpoint, read_checkpoint

        self.loaded = load_checkpoint(read_checkpoint(checkpoint))
        self.policy = self.loaded.policy

    def step(
        self,
        observation: dict[str, np.ndarray],
        noise: np.ndarray,
        leftover: np.ndarray | None = None,
        delay: int = 0,
        *,
        horizon: int = HORIZON,
        schedule: str = "LINEAR",
        cap: float = GUIDANCE,
    ) -> np.ndarray:
        """The served steps of the chunk, un-normalised; ``leftover`` in the action's units (LeRobot's
        queue keeps it normalised: the reference normalises it with LeRobot's own statistics)."""
        import torch
        from lerobot.configs.types import RTCAttentionSchedule
        from lerobot.policies.utils import prepare_observation_for_inference

        self.policy.reset()
        rtc = self.policy.config.rtc_config
        rtc.prefix_attention_schedule, rtc.max_guidance_weight = RTCAttentionSchedule(schedule), cap
        obs = prepare_observation_for_inference(
            {k: v.copy() for k, v in observation.items()}, torch.device("cpu"), task=TASK
        )
        batch = dict(self.loaded.preprocessor(obs))
        kwargs: dict[str, Any] = {}
        if leftover is not None:
            normalised = self.loaded.unnormalizer._normalize_action(torch.from_numpy(leftover)[None], inverse=False)
            kwargs = {"inference_delay": delay, "prev_chunk_left_over": normalised, "execution_horizon": horizon}
        try:
            with torch.no_grad():
                chunk = self.policy.predict_action_chunk(batch, noise=torch.from_numpy(noise)[None], **kwargs)
        finally:
            rtc.prefix_attention_schedule = RTCAttentionSchedule.LINEAR
            rtc.max_guidance_weight = GUIDANCE
        return np.asarray(self.loaded.postprocessor(chunk)[0, :STEPS].numpy())

    def weights(self, delay: int, horizon: int, steps: int) -> np.ndarray:
        """LeRobot's own prefix weights for a leftover of ``steps`` (its horizon capped by it)."""
        return np.asarray(self.policy.model.rtc_processor.get_prefix_weights(delay, min(horizon, steps), CHUNK))


@pytest.fixture(scope="module")
def lerobot(smolvla_rtc_checkpoint: Path) -> LeRobotRTC:
    return LeRobotRTC(smolvla_rtc_checkpoint)


@pytest.fixture(scope="module")
def tolerance(smolvla_rtc_bundle: Path) -> float:
    """The f32 tolerance the bundle's gate holds it to, measured at export."""
    return bundle_tolerance(smolvla_rtc_bundle, "f32")


@pytest.fixture(scope="module")
def scale(smolvla_rtc_bundle: Path) -> np.ndarray:
    from tests.engine.arithmetic import action_scale

    return action_scale(smolvla_rtc_bundle)


@pytest.fixture(scope="module")
def tokens(smolvla_rtc_bundle: Path) -> tuple[np.ndarray, np.ndarray]:
    from runtime.bundle.bundle import Bundle
    from runtime.server.tasks import TaskEncoder

    ids, mask = TaskEncoder(Bundle.open(smolvla_rtc_bundle).manifest, smolvla_rtc_bundle).encode(TASK)
    return ids.copy(), mask.copy()  # the encoder's cache is read-only, which torch.from_numpy warns about


def observation(t: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(500 + t)
    return {
        IMAGE: rng.integers(0, 256, (96, 128, 3), dtype=np.uint8),
        STATE: (rng.normal(size=JOINTS) * 30).astype(np.float32),
    }


def leftover(t: int, steps: int, lerobot: LeRobotRTC) -> np.ndarray:
    """A leftover as a robot has one: the served chunk of an earlier request, from step ``t``, continued by
    another chunk when more steps are asked than one serves."""
    rng = np.random.default_rng(900 + t)
    flows = [rng.standard_normal((CHUNK, MAX_ACTION), dtype=np.float32) for _ in (0, 1)]
    chunks = [lerobot.step(observation(t + i), flow) for i, flow in enumerate(flows)]
    return np.concatenate(chunks)[:steps].astype(np.float32)


def noise(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((CHUNK, MAX_ACTION), dtype=np.float32)


def error(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> float:
    from tests.engine import arithmetic

    return arithmetic.normalised_error(got, want, scale, (STEPS, JOINTS))


def program_inputs(
    obs: dict[str, np.ndarray], tokens: tuple[np.ndarray, np.ndarray], flow: np.ndarray, rest: tuple[np.ndarray, ...]
) -> list[np.ndarray]:
    return [obs[IMAGE], obs[STATE], *tokens, flow, *rest]


def case(
    t: int, steps: int, delay: int, lerobot: LeRobotRTC
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Case ``t`` of CASES: its observation, flow noise, leftover of ``steps`` and the prefix inputs the
    server makes of them (the leftover padded to the chunk, LINEAR weights for ``delay``, the cap)."""
    from runtime.bundle.rtc import prefix_weights

    obs, flow = observation(t), noise(40 + t)
    left = leftover(t, steps, lerobot)
    padded = np.zeros((CHUNK, JOINTS), np.float32)
    padded[:steps] = left
    return (
        obs,
        flow,
        left,
        (padded, prefix_weights(delay, HORIZON, CHUNK, "LINEAR", steps), np.array([GUIDANCE], np.float32)),
    )


def no_prefix() -> tuple[np.ndarray, ...]:
    """The prefix inputs of a request without a leftover: zeros, zero weights, the cap."""
    from runtime.bundle.rtc import no_prefix_weights

    return np.zeros((CHUNK, JOINTS), np.float32), no_prefix_weights(CHUNK), np.array([GUIDANCE], np.float32)


# --- the bundle ------------------------------------------------------------------------------


def test_manifest_lists_the_prefix_inputs_the_server_fills(smolvla_rtc_bundle: Path) -> None:
    from runtime.bundle.bundle import Bundle

    b = Bundle.open(smolvla_rtc_bundle, verify_all=True)
    m = b.manifest
    assert [(s.name, s.dtype, s.shape, s.role) for s in m.inputs][4:] == [
        (NOISE, "float32", (CHUNK, MAX_ACTION), "noise"),
        (PREFIX, "float32", (CHUNK, JOINTS), "prefix"),
        (WEIGHTS, "float32", (CHUNK,), "prefix_weights"),
        (CAP, "float32", (1,), "guidance"),
    ]
    assert [s.name for s in m.observation_inputs] == [IMAGE, STATE]  # clients send only the observation
    rtc = m.rtc
    assert rtc is not None and (rtc.prefix_input, rtc.weights_input, rtc.guidance_input) == (PREFIX, WEIGHTS, CAP)
    assert (rtc.chunk_size, rtc.execution_horizon, rtc.prefix_attention_schedule, rtc.max_guidance_weight) == (
        CHUNK,
        HORIZON,
        "LINEAR",
        GUIDANCE,
    )
    assert m.programs["CPU"].delegation == "full"  # one OpenVINO delegate: both engines run it
    # the test case guides: a leftover and weights that are not zero, so check and the canary replay RTC
    case = b.test_case()
    assert case.inputs[WEIGHTS][0] == 1.0 and np.abs(case.inputs[PREFIX]).max() > 1
    assert case.inputs[CAP].tolist() == [GUIDANCE]


def test_weights_are_lerobots_for_every_schedule(lerobot: LeRobotRTC) -> None:
    from lerobot.configs.types import RTCAttentionSchedule

    from runtime.bundle.rtc import SCHEDULES, prefix_weights

    rtc = lerobot.policy.model.rtc_processor
    try:
        for schedule in SCHEDULES:
            rtc.rtc_config.prefix_attention_schedule = RTCAttentionSchedule(schedule)
            for steps in range(1, CHUNK + 1):
                for delay in range(CHUNK):
                    for horizon in (1, 3, HORIZON, CHUNK, 2 * CHUNK):
                        want = lerobot.weights(delay, horizon, steps)
                        got = prefix_weights(delay, horizon, CHUNK, schedule, steps)
                        np.testing.assert_allclose(got, want, rtol=0, atol=2e-7)
    finally:
        rtc.rtc_config.prefix_attention_schedule = RTCAttentionSchedule.LINEAR


def test_the_graph_is_lerobots_rtc_path(smolvla_rtc_checkpoint: Path, lerobot: LeRobotRTC) -> None:
    """The module torch.export traces, in eager mode, against LeRobot's RTC path: no export. Every case
    of leftover and delay, and no leftover at all (zero weights)."""
    import torch
    from lerobot.policies.utils import prepare_observation_for_inference

    from runtime.export.lerobot import lerobot_export_plan

    factory, kwargs = lerobot_export_plan(smolvla_rtc_checkpoint)
    graph, example = factory()
    scale = np.asarray(kwargs["action_scale"])
    batch = lerobot.loaded.preprocessor(
        prepare_observation_for_inference(
            {k: v.copy() for k, v in observation(0).items()}, torch.device("cpu"), task=TASK
        )
    )
    tokens = (batch[TOKENS][0].numpy(), batch[MASK][0].numpy())

    def run(obs: dict[str, np.ndarray], flow: np.ndarray, rest: tuple[np.ndarray, ...]) -> np.ndarray:
        inputs = program_inputs(obs, tokens, flow, rest)
        assert len(inputs) == len(example)
        with torch.no_grad():
            return np.asarray(graph(*(torch.from_numpy(np.ascontiguousarray(v)) for v in inputs)).numpy())

    for t, (steps, delay) in enumerate(CASES):
        obs, flow, left, rest = case(t, steps, delay, lerobot)
        assert error(run(obs, flow, rest), lerobot.step(obs, flow, left, delay), scale) < 1e-4, (steps, delay)
    obs, flow = observation(9), noise(9)
    assert error(run(obs, flow, no_prefix()), lerobot.step(obs, flow), scale) < 1e-4


@pytest.mark.parametrize("engine_name", ["openvino", "executorch"])
def test_the_program_matches_lerobots_rtc_chunk(
    smolvla_rtc_bundle: Path,
    lerobot: LeRobotRTC,
    tokens: tuple[np.ndarray, np.ndarray],
    scale: np.ndarray,
    tolerance: float,
    engine_name: str,
) -> None:
    """Same observation, task, noise, leftover and delay: LeRobot's chunk, within the f32 tolerance;
    the guidance is real (the chunk moves towards the leftover); zero weights sample as without RTC."""
    from tests.engine.arithmetic import load_on_this_cpu

    loaded, report = load_on_this_cpu(smolvla_rtc_bundle, engine_name)
    held = bundle_tolerance(smolvla_rtc_bundle, loaded.info.precision)
    try:
        assert report.parity.ok  # the test case, with its leftover, replayed through the gate
        for t, (steps, delay) in enumerate(CASES):
            obs, flow, left, rest = case(t, steps, delay, lerobot)
            got = loaded.run_validated(program_inputs(obs, tokens, flow, rest))["action"]
            want = lerobot.step(obs, flow, left, delay)
            assert error(got, want, scale) < held, (steps, delay)
            plain = lerobot.step(obs, flow)
            # the guidance changed LeRobot's own chunk (both eager f32, whatever precision the engine ran)
            assert error(want, plain, scale) > 100 * tolerance
            n = min(steps, delay, STEPS)
            if n:  # the frozen steps follow the leftover far closer than plain sampling does
                assert error_of(want[:n], left[:n], scale) < error_of(plain[:n], left[:n], scale) / 2
        # no prefix: zero weights, plain sampling (LeRobot with no leftover)
        obs, flow = observation(9), noise(9)
        got = loaded.run_validated(program_inputs(obs, tokens, flow, no_prefix()))["action"]
        assert error(got, lerobot.step(obs, flow), scale) < held
    finally:
        loaded.close()


def error_of(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> float:
    return float((np.abs(got - want) / scale).max())


def test_other_schedules_and_caps_are_the_servers_to_choose(
    smolvla_rtc_bundle: Path,
    lerobot: LeRobotRTC,
    tokens: tuple[np.ndarray, np.ndarray],
    scale: np.ndarray,
    tolerance: float,
) -> None:
    """One program serves every schedule, horizon and cap: they are inputs, not constants."""
    from runtime.bundle.rtc import prefix_weights
    from tests.engine.arithmetic import load_on_this_cpu

    loaded, _ = load_on_this_cpu(smolvla_rtc_bundle, "openvino")
    try:
        for t, (schedule, horizon, cap) in enumerate((("EXP", 8, 3.0), ("ONES", 4, 20.0), ("ZEROS", CHUNK, 1.0))):
            obs, flow, steps, delay = observation(20 + t), noise(60 + t), 7, 3
            left = leftover(20 + t, steps, lerobot)
            padded = np.zeros((CHUNK, JOINTS), np.float32)
            padded[:steps] = left
            weights = prefix_weights(delay, horizon, CHUNK, schedule, steps)
            rest = (padded, weights, np.array([cap], np.float32))
            got = loaded.run_validated(program_inputs(obs, tokens, flow, rest))["action"]
            want = lerobot.step(obs, flow, left, delay, horizon=horizon, schedule=schedule, cap=cap)
            assert error(got, want, scale) < tolerance, schedule
    finally:
        loaded.close()


def test_export_rtc_flag_enables_it_on_a_checkpoint_without(smolvla_checkpoint: Path, smolvla_vlm: Path) -> None:
    """``--rtc`` on a checkpoint trained without it: LeRobot's RTC defaults, the same inputs."""
    from runtime.bundle.rtc import DEFAULT_EXECUTION_HORIZON, DEFAULT_MAX_GUIDANCE_WEIGHT, DEFAULT_SCHEDULE
    from runtime.export.lerobot import lerobot_export_plan

    _, plain = lerobot_export_plan(smolvla_checkpoint, vlm_dir=smolvla_vlm)
    assert "rtc" not in plain and not {"prefix", "prefix_weights", "guidance"} & set(plain["input_roles"].values())
    _, kwargs = lerobot_export_plan(smolvla_checkpoint, vlm_dir=smolvla_vlm, rtc=True)
    assert kwargs["rtc"] == {
        "prefix_input": PREFIX,
        "weights_input": WEIGHTS,
        "guidance_input": CAP,
        "chunk_size": CHUNK,
        "execution_horizon": DEFAULT_EXECUTION_HORIZON,
        "prefix_attention_schedule": DEFAULT_SCHEDULE,
        "max_guidance_weight": DEFAULT_MAX_GUIDANCE_WEIGHT,
    }
    assert [kwargs["input_roles"][n] for n in (PREFIX, WEIGHTS, CAP)] == ["prefix", "prefix_weights", "guidance"]


def test_rtc_is_refused_for_a_policy_it_does_not_apply_to(act_checkpoint: Path) -> None:
    from runtime.errors import ExportError
    from runtime.export.lerobot import lerobot_export_plan

    with pytest.raises(ExportError, match=r"--rtc: .*flow-matching policy's sampling \(SmolVLA\); .* is a act policy"):
        lerobot_export_plan(act_checkpoint, rtc=True)


def test_a_lerobot_whose_guidance_differs_is_refused_before_tracing(smolvla_rtc_checkpoint: Path) -> None:
    """The closed form is LeRobot's numbers only while LeRobot computes them this way: a release that
    took the gradient through the denoiser would be refused, not exported with other numbers."""
    from unittest import mock

    import torch
    from lerobot.policies.rtc.modeling_rtc import RTCProcessor

    from runtime.errors import ExportError
    from runtime.export.lerobot import lerobot_export_plan

    original = RTCProcessor.denoise_step

    def through_the_denoiser(self: Any, x_t: Any, prev: Any, delay: Any, time: Any, denoise: Any, h: Any = None) -> Any:
        return original(self, x_t, prev, delay, time, denoise, h) + 0.01 * torch.tanh(denoise(x_t))

    with (
        mock.patch.object(RTCProcessor, "denoise_step", through_the_denoiser),
        pytest.raises(ExportError, match=r"SmolVLA RTC: LeRobot's guided denoise step differs .* another way"),
    ):
        lerobot_export_plan(smolvla_rtc_checkpoint)


# --- serving ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(smolvla_rtc_bundle: Path) -> Iterator[Any]:
    from tests.engine.arithmetic import load_on_this_cpu

    loaded, _ = load_on_this_cpu(smolvla_rtc_bundle, "openvino")
    yield loaded
    loaded.close()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lrt-") as d:  # ipc paths must fit in 107 bytes
        yield Path(d)


def test_served_chunks_follow_the_leftover_as_lerobot_does(
    engine: Any, lerobot: LeRobotRTC, scale: np.ndarray, tolerance: float, short_tmp: Path
) -> None:
    """Over the wire: hello says the policy takes a prefix; a request with a leftover and a delay gets
    LeRobot's RTC chunk, one without gets its plain chunk, in the order the server draws the noise."""
    from runtime.client import PolicyClient
    from runtime.server import PolicyServer, ServerConfig

    drawn = np.random.default_rng(17)
    cfg = ServerConfig(endpoints=("ipc://p.sock",), canary_interval_s=0, noise_seed=17)
    with (
        PolicyServer(engine, cfg, runtime_directory=short_tmp) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=30) as client,
    ):
        info = client.hello()
        assert info.takes_prefix and info.prefix_steps == CHUNK and info.max_delay == STEPS - 1
        assert info.prefix_defaults == {
            "execution_horizon": HORIZON,
            "prefix_attention_schedule": "LINEAR",
            "max_guidance_weight": GUIDANCE,
        }
        assert [i.name for i in info.inputs] == [IMAGE, STATE]
        for t, (steps, delay) in enumerate(((4, 2), (CHUNK, 3))):
            left = leftover(30 + t, steps, lerobot)
            flow = drawn.standard_normal((CHUNK, MAX_ACTION), dtype=np.float32)
            want = lerobot.step(observation(t), flow, left, delay)
            got = client.infer(observation(t), task=TASK, prefix=left, delay=delay).actions
            assert error(got, want, scale) < tolerance
        want = lerobot.step(observation(5), drawn.standard_normal((CHUNK, MAX_ACTION), dtype=np.float32))
        assert error(client.infer(observation(5), task=TASK).actions, want, scale) < tolerance
        # a guidance cap of the request's own
        left = leftover(40, 6, lerobot)
        flow = drawn.standard_normal((CHUNK, MAX_ACTION), dtype=np.float32)
        want = lerobot.step(observation(6), flow, left, 1, horizon=4, schedule="EXP", cap=2.5)
        got = client.infer(
            observation(6),
            task=TASK,
            prefix=left,
            delay=1,
            execution_horizon=4,
            prefix_attention_schedule="exp",
            max_guidance_weight=2.5,
        ).actions
        assert error(got, want, scale) < tolerance
