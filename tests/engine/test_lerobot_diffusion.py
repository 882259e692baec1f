"""LeRobot Diffusion Policy: exported from its checkpoint and served, against LeRobot's own pipeline.

The reference is LeRobot's inference as its robot loop runs it: each observation through
``prepare_observation_for_inference`` and the preprocessor into the policy's queues
(``populate_queues``, as ``select_action`` does: the first observation fills every slot), then
``predict_action_chunk`` with the same noise, then the postprocessor. Errors are compared in
normalised units (half the action's min..max range: Diffusion Policy's
MIN_MAX normalisation). The bundle is exported once per module (about a minute on two
cores); skipped, with the reason, where LeRobot cannot be imported.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.export.lerobot import lerobot_available

REASON = lerobot_available()
pytestmark = [pytest.mark.export, pytest.mark.skipif(REASON is not None, reason=f"needs LeRobot: {REASON}")]

JOINTS = ("shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos", "gripper.pos")
IMAGE, STATE, NOISE = "observation.images.front", "observation.state", "noise"
HORIZON, STEPS = 8, 4  # the tiny checkpoint's horizon and n_action_steps
from runtime.bundle.manifest import DEFAULT_TOLERANCE  # noqa: E402

TOLERANCE = DEFAULT_TOLERANCE["f32"]  # normalised units (the manifest's default)


@pytest.fixture(scope="module")
def diffusion_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.policies.lerobot_checkpoints import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("lerobot") / "diffusion", "diffusion", "tiny")


@pytest.fixture(scope="module")
def diffusion_bundle(diffusion_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.cli import main

    out = tmp_path_factory.mktemp("bundles") / "diffusion"
    before = os.sched_getaffinity(0)
    args = ["export", "--lerobot", str(diffusion_checkpoint), "--out", str(out), "--action-names", ",".join(JOINTS)]
    status = main(args)
    os.sched_setaffinity(0, before)
    assert status == 0
    return out


@pytest.fixture(scope="module")
def scale(diffusion_bundle: Path) -> np.ndarray:
    from tests.engine.arithmetic import action_scale

    return action_scale(diffusion_bundle)


class LeRobotPipeline:
    """LeRobot's own inference on one checkpoint, one episode at a time."""

    def __init__(self, checkpoint: Path) -> None:
        from runtime.export.lerobot import load_checkpoint, read_checkpoint

        self.loaded = load_checkpoint(read_checkpoint(checkpoint))
        self.policy = self.loaded.policy

    def new_episode(self) -> None:
        self.policy.reset()

    def step(self, observation: dict[str, np.ndarray], noise: np.ndarray) -> np.ndarray:
        import torch
        from lerobot.policies.utils import populate_queues, prepare_observation_for_inference

        obs = prepare_observation_for_inference({k: v.copy() for k, v in observation.items()}, torch.device("cpu"))
        batch = dict(self.loaded.preprocessor(obs))
        batch.pop("action", None)
        batch["observation.images"] = torch.stack([batch[k] for k in self.policy.config.image_features], dim=-4)
        self.policy._queues = populate_queues(self.policy._queues, batch)
        with torch.no_grad():
            chunk = self.policy.predict_action_chunk(batch, noise=torch.from_numpy(noise).unsqueeze(0))
            return np.asarray(self.loaded.postprocessor(chunk)[0].numpy())


@pytest.fixture(scope="module")
def lerobot(diffusion_checkpoint: Path) -> LeRobotPipeline:
    return LeRobotPipeline(diffusion_checkpoint)


def observation(t: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + t)
    return {
        IMAGE: rng.integers(0, 256, (96, 128, 3), dtype=np.uint8),
        STATE: (rng.normal(size=6) * 30).astype(np.float32),
    }


def noises(seed: int, n: int) -> list[np.ndarray]:
    """What a server with ``noise_seed = seed`` draws for its first ``n`` inferences."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((HORIZON, 6), dtype=np.float32) for _ in range(n)]


def normalised_error(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> float:
    from tests.engine import arithmetic

    return arithmetic.normalised_error(got, want, scale, (STEPS, 6))


def _load(bundle: Path, engine: str = "openvino") -> tuple[Any, Any]:
    from tests.engine.arithmetic import load_on_this_cpu

    return load_on_this_cpu(bundle, engine)


@pytest.fixture(scope="module")
def engine(diffusion_bundle: Path) -> Iterator[Any]:
    loaded, _ = _load(diffusion_bundle)
    yield loaded
    loaded.close()


def test_graph_matches_lerobot_sampling_with_history(diffusion_checkpoint: Path, lerobot: LeRobotPipeline) -> None:
    """The module torch.export traces, in eager mode: two frames and the noise in, LeRobot's chunk out."""
    import torch

    from runtime.export.lerobot import lerobot_export_plan

    factory, kwargs = lerobot_export_plan(diffusion_checkpoint)
    graph, example = factory()
    assert {k: tuple(v.shape) for k, v in example.items()} == {
        IMAGE: (2, 96, 128, 3),  # n_obs_steps frames, oldest first
        STATE: (2, 6),
        NOISE: (HORIZON, 6),  # the horizon's initial sample, supplied per request
    }
    with torch.no_grad():
        got = graph(*example.values()).numpy()
    lerobot.new_episode()
    noise = example[NOISE].numpy()
    for t in range(2):
        want = lerobot.step({k: example[k][t].numpy() for k in (IMAGE, STATE)}, noise)
    assert normalised_error(got, want, np.asarray(kwargs["action_scale"])) < 1e-5
    # the noise is an input that matters: another noise, another chunk
    example[NOISE] = torch.randn(HORIZON, 6, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert np.abs(graph(*example.values()).numpy() - got).max() > 1e-3


def test_graph_matches_lerobot_with_two_cameras(tmp_path: Path) -> None:
    """The cameras stacked as LeRobot stacks them (their order matters once there are two): eager."""
    import torch

    from runtime.export.lerobot import lerobot_export_plan
    from runtime.policies.lerobot_checkpoints import write_checkpoint

    checkpoint = write_checkpoint(tmp_path / "diffusion", "diffusion", "tiny", cameras=("front", "wrist"))
    factory, kwargs = lerobot_export_plan(checkpoint)
    graph, example = factory()
    with torch.no_grad():
        got = graph(*example.values()).numpy()
    pipeline = LeRobotPipeline(checkpoint)
    pipeline.new_episode()
    inputs = [k for k in example if k != NOISE]
    assert len(inputs) == 3
    for t in range(2):
        want = pipeline.step({k: example[k][t].numpy() for k in inputs}, example[NOISE].numpy())
    assert normalised_error(got, want, np.asarray(kwargs["action_scale"])) < 1e-5


def test_manifest_records_history_and_noise(diffusion_bundle: Path) -> None:
    from runtime.bundle.bundle import Bundle

    m = Bundle.open(diffusion_bundle, verify_all=True).manifest
    assert [(s.name, s.dtype, s.shape, s.role) for s in m.inputs] == [
        (IMAGE, "uint8", (2, 96, 128, 3), "image"),
        (STATE, "float32", (2, 6), "state"),
        (NOISE, "float32", (HORIZON, 6), "noise"),
    ]
    assert m.observation_history == 2
    assert [(s.name, s.shape) for s in m.observation_inputs] == [(IMAGE, (96, 128, 3)), (STATE, (6,))]
    assert m.outputs[0].shape == (STEPS, 6) and m.action_names == JOINTS
    assert m.source["policy_type"] == "diffusion" and m.source["n_obs_steps"] == 2
    assert m.programs["CPU"].delegation == "full"  # one OpenVINO delegate: both engines run it


@pytest.mark.parametrize("engine_name", ["openvino", "executorch"])
def test_exported_program_matches_lerobot_over_an_episode(
    diffusion_bundle: Path, lerobot: LeRobotPipeline, scale: np.ndarray, engine_name: str
) -> None:
    from runtime.bundle.manifest import Manifest
    from runtime.server.history import ObservationHistory

    loaded, report = _load(diffusion_bundle, engine_name)
    try:
        # Diffusion Policy normalises actions to [-1, 1] over the dataset's min..max (LeRobot's default)
        assert report.parity.ok and "half the action min..max range" in report.parity.units
        manifest: Manifest = loaded.manifest
        history = ObservationHistory(manifest)
        lerobot.new_episode()
        for t, noise in enumerate(noises(3, 3)):
            obs = observation(t)
            inputs = history.assemble("episode", [obs[s.name] for s in manifest.observation_inputs], float(t))
            inputs[2] = noise
            got = loaded.run_validated(inputs)["action"]
            want = lerobot.step(obs, noise)
            assert normalised_error(got, want, scale) < DEFAULT_TOLERANCE[loaded.info.precision]
            assert np.abs(want).max() > 5  # un-normalised actions of real magnitude
    finally:
        loaded.close()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # ipc paths must fit in 107 bytes; pytest's tmp_path can be longer
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lrt-") as d:
        yield Path(d)


def _server(engine: Any, tmp_path: Path, **config: Any) -> Any:
    from runtime.server import PolicyServer, ServerConfig

    cfg = ServerConfig(endpoints=("ipc://p.sock",), canary_interval_s=0, **config)
    return PolicyServer(engine, cfg, runtime_directory=tmp_path)


def test_served_episode_matches_lerobot_with_the_servers_noise(
    engine: Any, lerobot: LeRobotPipeline, scale: np.ndarray, short_tmp: Path
) -> None:
    """Clients send one frame and no noise; the server keeps each client's history and draws the noise."""
    from runtime.client import PolicyClient

    drawn = iter(noises(11, 6))  # the server draws once per inference, in the order it runs them
    with (
        _server(engine, short_tmp, noise_seed=11, history_max_gap_s=0) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as a,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as b,
    ):
        info = a.hello()
        assert [(i.name, i.shape) for i in info.inputs] == [(IMAGE, (96, 128, 3)), (STATE, (6,))]
        assert info.history_frames == 2 and info.noise_inputs == (NOISE,)
        lerobot.new_episode()
        for t in range(3):  # a's episode: frames 0, 1, 2
            want = lerobot.step(observation(t), next(drawn))
            assert normalised_error(a.infer(observation(t)).actions, want, scale) < TOLERANCE
        # b's history is its own: its first observation fills both of its slots
        lerobot.new_episode()
        want = lerobot.step(observation(7), next(drawn))
        assert normalised_error(b.infer(observation(7)).actions, want, scale) < TOLERANCE
        # a goes on from frame 2, untouched by b
        lerobot.new_episode()
        lerobot.step(observation(2), noises(99, 1)[0])  # only fills the queues
        want = lerobot.step(observation(3), next(drawn))
        assert normalised_error(a.infer(observation(3)).actions, want, scale) < TOLERANCE
        # a new episode: reset forgets frames 2 and 3
        lerobot.new_episode()
        want = lerobot.step(observation(4), next(drawn))
        assert normalised_error(a.infer(observation(4), reset=True).actions, want, scale) < TOLERANCE
        assert server.history.resets == 3  # a's first, b's first, a's reset


def test_bad_observations_are_refused_by_name_and_serving_goes_on(
    engine: Any, lerobot: LeRobotPipeline, scale: np.ndarray, short_tmp: Path
) -> None:
    from runtime.client import PolicyClient
    from runtime.protocol.errors import BadInputError

    obs = observation(0)
    with (
        _server(engine, short_tmp, noise_seed=5) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as client,
    ):
        # the program's own shape (two frames) is not what clients send
        with pytest.raises(BadInputError) as err:
            client.infer({**obs, STATE: np.zeros((2, 6), np.float32)})
        assert err.value.field == STATE and err.value.expected == "[6]" and err.value.received == "[2, 6]"
        with pytest.raises(BadInputError) as err:
            client.infer({**obs, NOISE: np.zeros((HORIZON, 6), np.float32)})
        assert err.value.field == NOISE
        assert "the server draws this policy's sampling noise" in str(err.value)
        with pytest.raises(BadInputError) as err:
            client.infer({IMAGE: obs[IMAGE][:, :64]})
        assert err.value.field == STATE  # missing is named before the image's shape
        # refused observations did not enter the history, nor drew noise: the first good one starts it
        lerobot.new_episode()
        want = lerobot.step(obs, noises(5, 1)[0])
        assert normalised_error(client.infer(obs).actions, want, scale) < TOLERANCE
        assert server.history.resets == 1


def test_control_loop_path_keeps_its_own_history(
    engine: Any, lerobot: LeRobotPipeline, scale: np.ndarray, short_tmp: Path
) -> None:
    """``submit_local`` (the in-process control loop): one frame per call, ``reset`` at the start of a run."""

    def submit(server: Any, obs: dict[str, np.ndarray], reset: bool) -> np.ndarray:
        done = threading.Event()
        result: list[Any] = []

        def on_done(actions: Any, error: str | None) -> None:
            result.append(error if actions is None else actions)
            done.set()

        frame: Sequence[np.ndarray] = [obs[IMAGE], obs[STATE]]
        assert server.submit_local(list(frame), on_done, reset=reset)
        assert done.wait(30)
        assert isinstance(result[0], np.ndarray), result[0]
        return result[0]

    drawn = iter(noises(21, 3))
    with _server(engine, short_tmp, noise_seed=21, history_max_gap_s=0) as server:
        lerobot.new_episode()
        for t, reset in ((0, True), (1, False)):
            want = lerobot.step(observation(t), next(drawn))
            assert normalised_error(submit(server, observation(t), reset), want, scale) < TOLERANCE
        lerobot.new_episode()  # control start again: a new run
        want = lerobot.step(observation(5), next(drawn))
        assert normalised_error(submit(server, observation(5), True), want, scale) < TOLERANCE
