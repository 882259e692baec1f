"""The generic LeRobot graph and its draws without a LeRobot model: cameras to float channels-first,
normalisation, the batch of one, the family's inputs in order, the steps served; the seeded test case;
the random draws read from noise inputs, worked by hand. Stand-in families and processors; the graphs
of real policies against LeRobot's own pipeline are in tests/engine/test_lerobot*.py."""

from __future__ import annotations

import math
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from runtime.errors import ExportError
from runtime.export.lerobot.checkpoint import Checkpoint, Feature
from runtime.export.lerobot.draws import Draws, _TorchWithDraws, categorical, drawing_from, integers, uniform
from runtime.export.lerobot.family import Family
from runtime.export.lerobot.graph import LeRobotGraph, example_inputs

WHERE = "ACT policy ckpt"


# --- the draws ---


def test_uniform_is_the_standard_normals_cdf() -> None:
    got = uniform(torch.tensor([0.0, 1.0, -1.0, 2.0], dtype=torch.float64))
    expected = [0.5, 0.8413447460685429, 0.15865525393145707, 0.9772498680518208]
    assert got.tolist() == pytest.approx(expected, abs=1e-12)


def test_integers_split_the_uniform_into_equal_parts() -> None:
    x = torch.tensor([0.0, 1.0, -1.0, 10.0, -10.0, 0.3186393639643752])
    got = integers(0, 4, x)
    # u = 0.5, 0.841, 0.159, 1.0, 0.0, 0.625: floor(4u), the top one clamped to 3
    assert got.dtype == torch.long
    assert got.tolist() == [2, 3, 0, 3, 0, 2]
    assert integers(2, 5, torch.tensor([0.0, -10.0, 10.0])).tolist() == [3, 2, 4]


def test_a_categorical_draw_inverts_the_cumulative_share_of_unnormalised_weights() -> None:
    probs = torch.tensor([[1.0, 1.0, 2.0], [1.0, 1.0, 2.0], [1.0, 1.0, 2.0], [0.0, 3.0, 1.0]])
    # thresholds u * 4: 2.0, 3.37, 0.63, 2.0 against the cumulative sums [1, 2, 4] and [0, 3, 4]
    got = categorical(probs, torch.tensor([0.0, 1.0, -1.0, 0.0]))
    assert got.dtype == torch.long
    assert got.shape == (4, 1)
    assert got.tolist() == [[1], [2], [0], [1]]
    # exactly on a boundary the lower category is taken: u * 2 = 1.0 = cdf[0]
    assert categorical(torch.tensor([[1.0, 1.0]], dtype=torch.float64), torch.tensor([0.0])).tolist() == [[0]]


def test_draws_are_taken_in_order_by_kind() -> None:
    a, b = torch.zeros(2, 3), torch.ones(2, 3)
    draws = Draws(WHERE, randn=[a, b], randint=[torch.zeros(4)])
    assert draws.take("randn", (2, 3)) is a
    assert draws.take("randint", [4]) is not None
    assert draws.take("randn", [2, 3]) is b
    draws.check_all_taken()


def test_one_draw_too_many_is_refused_counting_those_provided() -> None:
    draws = Draws(WHERE, randn=[torch.zeros(1), torch.zeros(1)])
    draws.take("randn", (1,))
    draws.take("randn", (1,))
    with pytest.raises(ExportError) as e:
        draws.take("randn", (1,))
    assert str(e.value) == (
        f"{WHERE}: LeRobot's code made one more randn draw than the 2 the exporter provides noise for; the policy's "
        "inference differs from what this LeRobot version's exporter knows (check the LeRobot version, "
        "runtime.export.lerobot.torchvision_shim)"
    )
    with pytest.raises(ExportError) as e:
        draws.take("multinomial", (1,))
    assert str(e.value).startswith(f"{WHERE}: LeRobot's code made one more multinomial draw than the 0 the exporter")


def test_a_draw_of_another_shape_is_refused_naming_its_number() -> None:
    draws = Draws(WHERE, randn=[torch.zeros(2, 3), torch.zeros(2, 3)])
    draws.take("randn", (2, 3))
    with pytest.raises(ExportError) as e:
        draws.take("randn", (3, 2))
    assert str(e.value) == (
        f"{WHERE}: randn draw 1: expected shape [2, 3], LeRobot asked for [3, 2]; the exporter's noise layout no "
        "longer matches LeRobot's code"
    )


def test_draws_left_over_are_refused_counting_them_by_kind() -> None:
    draws = Draws(WHERE, randn=[torch.zeros(1), torch.zeros(1)], randint=[torch.zeros(1)], multinomial=[])
    draws.take("randint", (1,))
    with pytest.raises(ExportError) as e:
        draws.check_all_taken()
    assert str(e.value) == (
        f"{WHERE}: LeRobot's code made fewer draws than the exporter provides noise for (left over: {{'randn': 2}}); "
        "the noise layout no longer matches this LeRobot version's code"
    )


def test_torch_as_lerobot_sees_it_draws_from_the_inputs() -> None:
    noise = torch.tensor([[0.5, -0.5, 1.0], [0.0, 0.0, 0.0]])
    fake = _TorchWithDraws(
        Draws(
            WHERE,
            randn=[noise, noise, noise, noise],
            randint=[torch.tensor([0.0, 10.0])],
            multinomial=[torch.tensor([0.0, 1.0])],
        )
    )
    assert fake.randn(2, 3) is noise
    assert fake.randn((2, 3)) is noise
    assert fake.randn([2, 3], generator=None) is noise
    like = fake.randn_like(torch.zeros(2, 3, dtype=torch.float64))  # the noise input is float32
    assert like.dtype == torch.float64
    assert like.tolist() == [[0.5, -0.5, 1.0], [0.0, 0.0, 0.0]]
    assert fake.randint(0, 4, (2,)).tolist() == [2, 3]
    probs = torch.tensor([[1.0, 1.0, 2.0], [1.0, 1.0, 2.0]])
    assert fake.multinomial(probs, 1).tolist() == [[1], [2]]
    assert fake.tanh is torch.tanh  # everything but the draws is torch's
    empty = fake.empty(2, 3, dtype=torch.float64)
    assert empty.dtype == torch.float64
    assert empty.tolist() == [[0.0] * 3] * 2


def test_a_categorical_draw_comes_back_as_many_times_as_asked() -> None:
    fake = _TorchWithDraws(Draws(WHERE, index_copies=3, multinomial=[torch.tensor([0.0, 1.0])]))
    probs = torch.tensor([[1.0, 1.0, 2.0], [1.0, 1.0, 2.0]])
    assert fake.multinomial(probs, 1).tolist() == [[1, 1, 1], [2, 2, 2]]
    twice = _TorchWithDraws(Draws(WHERE, index_copies=2, multinomial=[torch.tensor([0.0, 1.0])]))
    assert twice.multinomial(probs, 1).tolist() == [[1, 1], [2, 2]]  # as TD-MPC's planner takes it
    with pytest.raises(ExportError) as e:
        fake.multinomial(probs, 2)
    assert str(e.value) == f"{WHERE}: multinomial with num_samples=2; expected 1"


def test_drawing_from_swaps_the_modules_torch_for_the_block_and_checks_every_draw_was_taken() -> None:
    module = types.ModuleType("lerobot_like")
    module.torch = torch  # type: ignore[attr-defined]
    x = torch.ones(2)
    with drawing_from(module, Draws(WHERE, randn=[x])):
        assert isinstance(module.torch, _TorchWithDraws)  # type: ignore[attr-defined]
        assert module.torch.randn(2) is x  # type: ignore[attr-defined]
    assert module.torch is torch  # type: ignore[attr-defined]
    with pytest.raises(ExportError, match=r"left over: \{'randn': 1\}"), drawing_from(module, Draws(WHERE, randn=[x])):
        pass
    assert module.torch is torch  # type: ignore[attr-defined]
    # the block's own error, not the left-over draws'
    with pytest.raises(ZeroDivisionError), drawing_from(module, Draws(WHERE, randn=[x])):
        raise ZeroDivisionError
    assert module.torch is torch  # type: ignore[attr-defined]


# --- the graph ---


class Normalizer:
    """Stands in for LeRobot's processors: observations times 10, actions plus 100; logs each call."""

    def __init__(self, stats: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, list[str], bool]] = []
        self._tensor_stats = stats or {}

    def _normalize_observation(self, batch: dict[str, torch.Tensor], inverse: bool) -> dict[str, torch.Tensor]:
        self.calls.append(("observation", list(batch), inverse))
        return {k: v * 10 for k, v in batch.items()}

    def _normalize_action(self, actions: torch.Tensor, inverse: bool) -> torch.Tensor:
        self.calls.append(("action", [], inverse))
        return actions + 100


class Recorder(Family):
    """A family that returns a chunk of 6 steps numbered 0..5 (times 1, 2 for two joints) and keeps
    what it was given."""

    policy_type = "act"
    policy_class = ("m", "C")

    def __init__(self, loaded: Any, extras: dict[str, Any]) -> None:
        super().__init__(loaded)
        self.extras = extras
        self.seen: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = []

    def first_step(self) -> int:
        return int(self.extras.get("first_step", 0))

    def language_inputs(self) -> dict[str, Any]:
        return dict(self.extras.get("language", {}))

    def noise_inputs(self) -> dict[str, tuple[int, ...]]:
        return dict(self.extras.get("noise", {}))

    def prefix_inputs(self) -> dict[str, Any]:
        return dict(self.extras.get("prefix", {}))

    def example_language(self) -> dict[str, torch.Tensor]:
        return {name: torch.full(shape, 7) for name, (shape, _) in self.language_inputs().items()}

    def example_prefix(self) -> dict[str, torch.Tensor]:
        return {name: torch.full(shape, 9.0) for name, (shape, _) in self.prefix_inputs().items()}

    def _chunk(self) -> torch.Tensor:
        steps = torch.arange(6, dtype=torch.float32)
        return torch.stack([steps, steps * 2], dim=-1).unsqueeze(0)

    def predict(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor]) -> torch.Tensor:
        self.seen.append(("predict", batch, noise, {}))
        return self._chunk()

    def predict_guided(
        self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor], prefix: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        self.seen.append(("guided", batch, noise, prefix))
        return self._chunk() * -1


def _family(inputs: tuple[Feature, ...], n_obs: int = 1, stats: dict[str, Any] | None = None, **extras: Any) -> Any:
    ckpt = Checkpoint(Path("ckpt"), "act", inputs, Feature("action", "ACTION", (2,)), 6, 6, n_obs, {})
    pre, post = Normalizer(stats), Normalizer()
    loaded = SimpleNamespace(checkpoint=ckpt, policy=torch.nn.Identity(), normalizer=pre, unnormalizer=post)
    return Recorder(loaded, extras)


CAMERA = Feature("cam", "VISUAL", (3, 2, 2))
STATE = Feature("observation.state", "STATE", (2,))


def _image(frames: tuple[int, ...] = ()) -> torch.Tensor:
    """uint8 [*frames, H=2, W=2, C=3], pixel (h, w, c) = 100 * frame + 10 * h + 3 * w + c."""
    h = torch.arange(2).reshape(2, 1, 1) * 10
    w = torch.arange(2).reshape(1, 2, 1) * 3
    c = torch.arange(3).reshape(1, 1, 3)
    one = h + w + c
    if not frames:
        return one.to(torch.uint8)
    return torch.stack([one + 100 * t for t in range(frames[0])]).to(torch.uint8)


def test_a_camera_becomes_float_channels_first_in_a_batch_of_one_and_the_steps_are_served() -> None:
    family = _family((CAMERA, STATE))
    graph = LeRobotGraph(family, 3)
    out = graph(_image(), torch.tensor([1.0, 2.0]))
    (kind, batch, noise, prefix) = family.seen[0]
    assert (kind, noise, prefix) == ("predict", {}, {})
    assert list(batch) == ["cam", "observation.state"]
    assert batch["cam"].dtype == torch.float32
    assert batch["cam"].shape == (1, 3, 2, 2)
    # channel c, row h, column w: (10 h + 3 w + c) / 255, then normalised (x 10)
    assert batch["cam"][0, 2, 1, 0].item() == pytest.approx((10 + 0 + 2) / 255 * 10)
    assert batch["cam"][0, 1, 0, 1].item() == pytest.approx((0 + 3 + 1) / 255 * 10)
    assert batch["observation.state"].tolist() == [[10.0, 20.0]]
    assert family.loaded.normalizer.calls == [("observation", ["cam", "observation.state"], False)]
    assert family.loaded.unnormalizer.calls == [("action", [], True)]
    assert out.tolist() == [[100.0, 100.0], [101.0, 102.0], [102.0, 104.0]]
    assert (graph.policy, graph.n_action_steps, graph.first_step) == (family.loaded.policy, 3, 0)


def test_a_family_serving_from_a_later_step_gets_the_steps_from_there() -> None:
    family = _family((STATE,), first_step=2)
    out = LeRobotGraph(family, 3)(torch.tensor([1.0, 2.0]))
    assert out.tolist() == [[102.0, 104.0], [103.0, 106.0], [104.0, 108.0]]


def test_a_history_of_frames_keeps_its_frame_axis_first() -> None:
    family = _family((CAMERA, STATE), n_obs=2)
    LeRobotGraph(family, 1)(_image((2,)), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    batch = family.seen[0][1]
    assert batch["cam"].shape == (1, 2, 3, 2, 2)
    assert batch["cam"][0, 1, 2, 1, 0].item() == pytest.approx((100 + 10 + 0 + 2) / 255 * 10)
    assert batch["observation.state"].tolist() == [[[10.0, 20.0], [30.0, 40.0]]]


def test_language_noise_and_prefix_inputs_follow_the_observation_in_that_order() -> None:
    family = _family(
        (STATE,),
        language={"tokens": ((3,), torch.int64), "mask": ((3,), torch.bool)},
        noise={"noise.a": (2,), "noise.b": (1,)},
        prefix={"p": ((6, 2), "prefix"), "w": ((6,), "prefix_weights")},
    )
    graph = LeRobotGraph(family, 2)
    tokens, mask = torch.tensor([5, 6, 7]), torch.tensor([True, False, True])
    a, b = torch.tensor([0.5, 0.25]), torch.tensor([2.0])
    p, w = torch.zeros(6, 2), torch.ones(6)
    out = graph(torch.tensor([1.0, 2.0]), tokens, mask, a, b, p, w)
    (kind, batch, noise, prefix) = family.seen[0]
    assert kind == "guided"
    assert list(batch) == ["observation.state", "tokens", "mask"]
    assert batch["tokens"].tolist() == [[5, 6, 7]]  # not normalised, batched
    assert batch["mask"].tolist() == [[True, False, True]]
    assert family.loaded.normalizer.calls == [("observation", ["observation.state"], False)]
    assert list(noise) == ["noise.a", "noise.b"]
    assert noise["noise.a"] is a and noise["noise.b"] is b
    assert list(prefix) == ["p", "w"]
    assert prefix["p"] is p and prefix["w"] is w
    assert out.tolist() == [[100.0, 100.0], [99.0, 98.0]]


def test_a_graph_called_with_an_input_missing_refuses_rather_than_drop_one() -> None:
    family = _family((CAMERA, STATE))
    with pytest.raises(ValueError, match="zip"):
        LeRobotGraph(family, 1)(_image())
    assert family.seen == []
    family = _family((CAMERA, STATE), language={"tokens": ((3,), torch.int64), "mask": ((3,), torch.bool)})
    with pytest.raises(ValueError, match="zip"):
        LeRobotGraph(family, 1)(_image(), torch.tensor([1.0, 2.0]), torch.tensor([5, 6, 7]))
    assert family.seen == []


def test_a_noise_or_prefix_input_too_few_or_too_many_is_refused_rather_than_dropped() -> None:
    state, a, b = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.25]), torch.tensor([2.0])
    family = _family((STATE,), noise={"noise.a": (2,), "noise.b": (1,)})
    with pytest.raises(ValueError, match="zip"):
        LeRobotGraph(family, 1)(state, a)  # noise.b missing
    with pytest.raises(ValueError, match="zip"):
        LeRobotGraph(family, 1)(state, a, b, torch.zeros(1))  # an input that is nothing
    family_p = _family(
        (STATE,), noise={"noise.a": (2,)}, prefix={"p": ((6, 2), "prefix"), "w": ((6,), "prefix_weights")}
    )
    with pytest.raises(ValueError, match="zip"):
        LeRobotGraph(family_p, 1)(state, a, torch.zeros(6, 2))  # the prefix's weights missing
    assert family.seen == [] and family_p.seen == []


def test_without_prefix_inputs_the_plain_prediction_gets_the_noise() -> None:
    family = _family((STATE,), noise={"noise": (2,)})
    LeRobotGraph(family, 1)(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    (kind, batch, noise, prefix) = family.seen[0]
    assert (kind, prefix) == ("predict", {})
    assert list(batch) == ["observation.state"]
    assert noise["noise"].tolist() == [3.0, 4.0]


# --- the test case ---


def test_the_test_case_is_seeded_around_the_statistics_and_in_the_programs_input_order() -> None:
    env = Feature("observation.environment_state", "ENV", (2,))
    other = Feature("observation.other", "STATE", (1,))
    half = Feature("observation.half", "STATE", (1,))
    stats = {
        "observation.state": {"mean": torch.tensor([10.0, -10.0]), "std": torch.tensor([2.0, 0.5])},
        "observation.environment_state": {"min": torch.tensor([0.0, -4.0]), "max": torch.tensor([8.0, 4.0])},
        "observation.half": {"mean": torch.tensor([5.0]), "min": torch.tensor([0.0])},  # neither pair whole
    }
    family = _family(
        (CAMERA, STATE, env, other, half),
        stats=stats,
        language={"tokens": ((3,), torch.int64)},
        noise={"noise": (2, 2)},
        prefix={"p": ((1,), "prefix")},
    )
    got = example_inputs(family, seed=5)
    assert list(got) == [
        "cam",
        "observation.state",
        "observation.environment_state",
        "observation.other",
        "observation.half",
        "tokens",
        "noise",
        "p",
    ]
    g = torch.Generator().manual_seed(5)
    image = torch.randint(0, 256, (2, 2, 3), dtype=torch.uint8, generator=g)
    state = torch.randn(2, generator=g)
    env_x = torch.randn(2, generator=g)
    other_x = torch.randn(1, generator=g)
    half_x = torch.randn(1, generator=g)
    noise = torch.randn(2, 2, generator=g)
    assert got["cam"].dtype == torch.uint8
    assert torch.equal(got["cam"], image)
    assert got["observation.state"].tolist() == pytest.approx([10 + 2 * state[0].item(), -10 + 0.5 * state[1].item()])
    clamped = [max(-2.0, min(2.0, v)) for v in env_x.tolist()]
    assert got["observation.environment_state"].tolist() == pytest.approx(
        [(clamped[0] + 2) / 4 * 8, -4 + (clamped[1] + 2) / 4 * 8]
    )
    assert torch.equal(got["observation.other"], other_x)
    assert torch.equal(got["observation.half"], half_x)
    assert got["tokens"].tolist() == [7, 7, 7]
    assert torch.equal(got["noise"], noise)
    assert got["p"].tolist() == [9.0]


@pytest.mark.parametrize("n_obs", [2, 3])
def test_a_test_case_with_history_has_frames_first_and_seed_zero_by_default(n_obs: int) -> None:
    family = _family((CAMERA, STATE), n_obs=n_obs)
    got = example_inputs(family)
    assert got["cam"].shape == (n_obs, 2, 2, 3)
    assert got["observation.state"].shape == (n_obs, 2)
    assert got["observation.state"].is_contiguous()
    g = torch.Generator().manual_seed(0)
    assert torch.equal(got["cam"], torch.randint(0, 256, (n_obs, 2, 2, 3), dtype=torch.uint8, generator=g))
    assert torch.equal(got["observation.state"], torch.randn(n_obs, 2, generator=g))


def test_an_env_input_far_outside_its_range_is_clamped_to_it() -> None:
    env = Feature("observation.environment_state", "ENV", (200,))
    stats = {"observation.environment_state": {"min": torch.full((200,), -1.0), "max": torch.full((200,), 1.0)}}
    got = example_inputs(_family((env,), stats=stats), seed=1)["observation.environment_state"]
    assert got.min().item() >= -1.0 and got.max().item() <= 1.0
    assert math.isclose(got.abs().max().item(), 1.0)  # 200 normals: some beyond 2 std, clamped to the bound
