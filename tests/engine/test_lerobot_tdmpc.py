"""LeRobot TD-MPC: exported from its checkpoint and served, against LeRobot's own planner.

The reference is LeRobot's inference as ``select_action`` runs it at an episode's start: the
observation through ``prepare_observation_for_inference`` and the preprocessor into the policy's
queues, ``predict_action_chunk`` (encoder, MPPI/CEM planning), the postprocessor, with LeRobot's
random draws replayed from the same standard normals the program takes as its noise inputs. Errors
are in normalised units (half the action's min..max range: TD-MPC's MIN_MAX normalisation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.bundle.manifest import DEFAULT_TOLERANCE
from runtime.export.lerobot import lerobot_available
from tests.engine.lerobot_draws import replayed_draws

REASON = lerobot_available()
pytestmark = [pytest.mark.export, pytest.mark.skipif(REASON is not None, reason=f"needs LeRobot: {REASON}")]

JOINTS = ("shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos", "gripper.pos")
IMAGE, STATE = "observation.image", "observation.state"
HORIZON, STEPS = 4, 4  # the tiny checkpoint's plan: 4 steps, all executed
NOISE_SHAPES = {  # the tiny checkpoint: 8 policy + 32 Gaussian samples, 2 CEM iterations, 5 Q functions
    "noise.pi": (HORIZON, 8, 6),
    "noise.cem": (2, HORIZON, 32, 6),
    "noise.terminal": (2, 40, 6),
    "noise.ensemble": (2, 2),
    "noise.elite": (1,),
}


def observation(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        IMAGE: rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
        STATE: (rng.normal(size=6) * 30).astype(np.float32),
    }


def server_noise(seed: int, n: int) -> list[dict[str, np.ndarray]]:
    """What a server with ``noise_seed = seed`` draws for its first ``n`` inferences (manifest order)."""
    rng = np.random.default_rng(seed)
    return [{k: rng.standard_normal(s, dtype=np.float32) for k, s in NOISE_SHAPES.items()} for _ in range(n)]


def lerobot_chunk(loaded: Any, obs: dict[str, np.ndarray], noise: dict[str, np.ndarray]) -> np.ndarray:
    """LeRobot's own first chunk of an episode, its draws replayed from ``noise``."""
    import torch
    from lerobot.policies.utils import populate_queues, prepare_observation_for_inference

    policy = loaded.policy
    n = {k: torch.from_numpy(v) for k, v in noise.items()}
    randn = [n["noise.pi"][t].unsqueeze(1) for t in range(HORIZON)] if n else []  # no noise: no planning
    for i in range(2 if n else 0):
        randn += [n["noise.cem"][i].unsqueeze(2), n["noise.terminal"][i].unsqueeze(1)]
    policy.reset()
    batch = dict(loaded.preprocessor(prepare_observation_for_inference(dict(obs), torch.device("cpu"))))
    batch.pop("action", None)
    batch["observation.image"] = batch[next(iter(policy.config.image_features))]  # as select_action does
    policy._queues = populate_queues(policy._queues, batch)
    with torch.no_grad(), replayed_draws(randn, list(n.get("noise.ensemble", [])), [n["noise.elite"]] if n else []):
        chunk = policy.predict_action_chunk(batch)  # (horizon, batch, action_dim), as select_action queues it
    return np.asarray(loaded.postprocessor(chunk.transpose(0, 1))[0, :STEPS].numpy())


@pytest.fixture(scope="module")
def lerobot(tdmpc_checkpoint: Path) -> Any:
    from runtime.export.lerobot import load_checkpoint, read_checkpoint

    return load_checkpoint(read_checkpoint(tdmpc_checkpoint))


@pytest.fixture(scope="module")
def scale(tdmpc_bundle: Path) -> np.ndarray:
    from tests.engine.arithmetic import action_scale

    return action_scale(tdmpc_bundle)


def normalised_error(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> float:
    from tests.engine import arithmetic

    return arithmetic.normalised_error(got, want, scale, (STEPS, 6))


def _load(bundle: Path, engine: str) -> Any:
    from tests.engine.arithmetic import load_on_this_cpu

    loaded, report = load_on_this_cpu(bundle, engine)
    assert report.parity.ok and "half the action min..max range" in report.parity.units
    return loaded


def test_manifest_marks_every_draw_as_noise(tdmpc_bundle: Path) -> None:
    from runtime.bundle.bundle import Bundle

    m = Bundle.open(tdmpc_bundle, verify_all=True).manifest
    assert [(s.name, s.dtype, s.shape, s.role) for s in m.inputs] == [
        (IMAGE, "uint8", (64, 64, 3), "image"),
        (STATE, "float32", (6,), "state"),
        *[(k, "float32", s, "noise") for k, s in NOISE_SHAPES.items()],
    ]
    assert [s.name for s in m.observation_inputs] == [IMAGE, STATE]
    assert m.outputs[0].shape == (STEPS, 6) and m.action_names == JOINTS
    assert m.source["policy_type"] == "tdmpc" and m.source["chunk_size"] == HORIZON


def test_graph_is_lerobots_planner(tdmpc_checkpoint: Path, lerobot: Any) -> None:
    """The module torch.export traces, in eager mode, against LeRobot's own planner with the same draws."""
    import torch

    from runtime.export.lerobot import lerobot_export_plan

    factory, kwargs = lerobot_export_plan(tdmpc_checkpoint)
    graph, example = factory()
    assert {k: tuple(v.shape) for k, v in example.items() if k.startswith("noise.")} == NOISE_SHAPES
    with torch.no_grad():
        got = graph(*example.values()).numpy()
    want = lerobot_chunk(
        lerobot, {k: example[k].numpy() for k in (IMAGE, STATE)}, {k: example[k].numpy() for k in NOISE_SHAPES}
    )
    assert normalised_error(got, want, np.asarray(kwargs["action_scale"])) < 1e-6
    # the noise is an input that matters: other draws, another plan
    example["noise.cem"] = torch.randn(*NOISE_SHAPES["noise.cem"], generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert np.abs(graph(*example.values()).numpy() - got).max() > 1e-3


@pytest.mark.parametrize(
    "changes",
    [{"use_mpc": False, "n_action_steps": 1}, {"n_action_repeats": 2, "n_action_steps": 1}],
    ids=["the policy's own action", "the plan's first action repeated"],
)
def test_graph_is_lerobots_policy_without_planning_or_with_repeats(
    tdmpc_checkpoint: Path, tmp_path: Path, changes: dict[str, Any]
) -> None:
    """The other two ways TD-MPC acts: the policy network alone (no MPC), and one planned action held for
    several ticks; eager, against LeRobot with the same draws."""
    import json
    import shutil

    import torch

    from runtime.export.lerobot import lerobot_export_plan, load_checkpoint, read_checkpoint

    checkpoint = tmp_path / "tdmpc"
    shutil.copytree(tdmpc_checkpoint, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, **changes}))
    factory, kwargs = lerobot_export_plan(checkpoint)
    graph, example = factory()
    with torch.no_grad():
        got = graph(*example.values()).numpy()
    loaded = load_checkpoint(read_checkpoint(checkpoint))
    obs = {k: example[k].numpy() for k in (IMAGE, STATE)}
    noise = {k: example[k].numpy() for k in example if k.startswith("noise.")}
    first = lerobot_chunk(loaded, obs, noise)[:1]
    if changes.get("use_mpc", True):
        want = np.repeat(first, 2, axis=0)  # held for two ticks
    else:
        assert noise == {}  # nothing is drawn
        want = first
    assert got.shape == want.shape
    assert (np.abs(got - want) / np.asarray(kwargs["action_scale"])).max() < 1e-6


@pytest.mark.parametrize("engine_name", ["openvino", "executorch"])
def test_exported_chunk_matches_lerobot(tdmpc_bundle: Path, lerobot: Any, scale: np.ndarray, engine_name: str) -> None:
    loaded = _load(tdmpc_bundle, engine_name)
    try:
        worst = 0.0
        for t, noise in enumerate(server_noise(7, 3)):
            obs = observation(t)
            got = loaded.infer({**obs, **noise})["action"]
            want = lerobot_chunk(lerobot, obs, noise)
            worst = max(worst, normalised_error(got, want, scale))
            assert np.abs(want).max() > 5  # un-normalised actions of real magnitude
        assert worst < DEFAULT_TOLERANCE[loaded.info.precision], f"normalised error {worst:.3g}"
        print(f"tdmpc {engine_name} {loaded.info.precision}: max normalised error {worst:.3g}")
    finally:
        loaded.close()


def test_served_over_the_wire_with_the_servers_noise(
    tdmpc_bundle: Path, lerobot: Any, scale: np.ndarray, tmp_path: Path
) -> None:
    from runtime.client import PolicyClient
    from runtime.server import PolicyServer, ServerConfig

    engine = _load(tdmpc_bundle, "openvino")
    drawn = iter(server_noise(13, 2))
    config = ServerConfig(endpoints=("ipc://t.sock",), canary_interval_s=0, noise_seed=13)
    with (
        PolicyServer(engine, config, runtime_directory=tmp_path) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as client,
    ):
        info = client.hello()
        assert info.action_names == JOINTS and info.noise_inputs == tuple(NOISE_SHAPES)
        for t in (3, 4):
            chunk = client.infer(observation(t)).actions
            want = lerobot_chunk(lerobot, observation(t), next(drawn))
            assert normalised_error(chunk, want, scale) < DEFAULT_TOLERANCE["f32"]
