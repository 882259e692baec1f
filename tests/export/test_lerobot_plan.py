"""The export plan of a LeRobot checkpoint without loading a model: the steps served, joint names, input
roles, the source record, real-time chunking and language, each refusal word for word (a config written
in the test, a stand-in family and loader); the VLM's directory and the action's scale (stand-in
processors). Loading a real checkpoint and exporting it are in tests/engine/test_lerobot*.py."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import huggingface_hub  # imported once here rather than in each test that stands in for it
import pytest
import torch

import runtime.export.lerobot.plan as plan
from runtime.errors import ExportError
from runtime.export.lerobot.checkpoint import Checkpoint, Feature, read_checkpoint
from runtime.export.lerobot.family import Family
from runtime.export.lerobot.loader import action_scale, resolve_vlm
from tests.export.test_lerobot_checkpoint import _config, _write

SCALE = ((1.5, 2.0, 2.5, 3.0, 3.5, 4.0), "action std (normalised units)")


class StandIn(Family):
    """A family whose extras are set per test; records the checks made."""

    policy_type = "act"
    policy_class = ("nowhere", "Nothing")
    checked: ClassVar[list[str]] = []
    extras: ClassVar[dict[str, Any]] = {}

    def check(self) -> None:
        self.checked.append("check")
        if "refuse" in self.extras:
            raise ExportError(self.extras["refuse"])

    def first_step(self) -> int:
        return int(self.extras.get("first_step", 0))

    def language_inputs(self) -> dict[str, Any]:
        return dict(self.extras.get("language_inputs", {}))

    def language(self) -> dict[str, Any] | None:
        return self.extras.get("language")

    def noise_inputs(self) -> dict[str, tuple[int, ...]]:
        return dict(self.extras.get("noise_inputs", {}))

    def prefix_inputs(self) -> dict[str, Any]:
        return dict(self.extras.get("prefix_inputs", {}))

    def rtc(self) -> dict[str, Any] | None:
        return self.extras.get("rtc")


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The plan with a stand-in loader, family and scale; ``.loads`` logs what was loaded."""
    loads: list[tuple[Any, ...]] = []

    def load_checkpoint(ckpt: Checkpoint, *, vlm_dir: Any = None, rtc: bool = False) -> Any:
        loads.append((ckpt.policy_type, vlm_dir, rtc))
        policy = SimpleNamespace(config=SimpleNamespace(vlm_model_name=Path("/models/vlm")))
        return SimpleNamespace(checkpoint=ckpt, policy=policy)

    StandIn.checked = []
    StandIn.extras = {}
    monkeypatch.setattr(plan, "load_checkpoint", load_checkpoint)
    monkeypatch.setattr(plan, "family_class", lambda policy_type: {"act": StandIn, "smolvla": StandIn}[policy_type])

    def action_scale(loaded: Any) -> Any:
        assert loaded.checkpoint.policy_type == loads[-1][0]  # the loaded checkpoint's scale
        return SCALE

    monkeypatch.setattr(plan, "action_scale", action_scale)
    monkeypatch.setattr(plan, "package_version", lambda name: f"{name} 9.9")
    return SimpleNamespace(loads=loads)


JOINTS = ("j1", "j2", "j3", "j4", "j5", "j6")


def test_the_plan_of_a_plain_policy_whole(tmp_path: Path, stand_in: Any) -> None:
    d = _write(tmp_path, _config())
    _, kwargs = plan.lerobot_export_plan(d, action_names=JOINTS)
    assert kwargs == {
        "policy_name": "lerobot_act",
        "action_names": JOINTS,
        "image_inputs": ("observation.images.front",),
        "action_scale": SCALE[0],
        "scale_source": SCALE[1],
        "source": {
            "kind": "lerobot",
            "policy_type": "act",
            "lerobot_version": "lerobot 9.9",
            "checkpoint": str(d.resolve()),
            "chunk_size": 10,
            "n_action_steps": 5,
            "n_obs_steps": 2,
        },
        "description": "LeRobot act policy from ckpt",
        "model_batch": 1,
        "input_roles": {
            "observation.images.front": "image",
            "observation.state": "state",
            "observation.environment_state": "env",
        },
        "observation_history": 2,
    }
    assert stand_in.loads == [("act", None, False)]
    assert StandIn.checked == ["check"]


def test_the_factory_builds_the_graph_with_the_steps_served_and_its_example(
    tmp_path: Path, stand_in: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runtime.export.lerobot.graph as graph

    built: list[Any] = []

    class Graph:
        def __init__(self, family: Family, steps: int) -> None:
            built.append((type(family), family.checkpoint.policy_type, steps))

        def eval(self) -> str:
            return "graph in eval mode"

    monkeypatch.setattr(graph, "LeRobotGraph", Graph)
    monkeypatch.setattr(graph, "example_inputs", lambda family: {"example of": type(family).__name__})
    factory, _ = plan.lerobot_export_plan(_write(tmp_path, _config()), n_action_steps=3, action_names=JOINTS)
    assert built == []  # nothing traced before the factory is called
    assert factory() == ("graph in eval mode", {"example of": "StandIn"})
    assert built == [(StandIn, "act", 3)]


def test_steps_default_to_the_familys_and_are_refused_past_the_usable_ones(tmp_path: Path, stand_in: Any) -> None:
    d = _write(tmp_path, _config(chunk_size=10, n_action_steps=5))
    assert plan.lerobot_export_plan(d, action_names=JOINTS)[1]["source"]["n_action_steps"] == 5
    assert plan.lerobot_export_plan(d, action_names=JOINTS, n_action_steps=10)[1]["source"]["n_action_steps"] == 10
    assert plan.lerobot_export_plan(d, action_names=JOINTS, n_action_steps=1)[1]["source"]["n_action_steps"] == 1
    with pytest.raises(ExportError) as e:
        plan.lerobot_export_plan(d, action_names=JOINTS, n_action_steps=11)
    assert str(e.value) == "--n-action-steps: expected 1..10 (the policy predicts 10 usable steps), got 11"
    StandIn.extras = {"first_step": 3}  # TD-MPC-like: the chunk's first steps are not served
    with pytest.raises(ExportError) as e:
        plan.lerobot_export_plan(d, action_names=JOINTS, n_action_steps=8)
    assert str(e.value) == "--n-action-steps: expected 1..7 (the policy predicts 7 usable steps), got 8"
    with pytest.raises(ExportError) as e:
        plan.lerobot_export_plan(d, action_names=JOINTS, n_action_steps=-1)
    assert str(e.value) == "--n-action-steps: expected 1..7 (the policy predicts 7 usable steps), got -1"


def test_a_familys_refusal_comes_before_anything_is_planned(tmp_path: Path, stand_in: Any) -> None:
    StandIn.extras = {"refuse": "no way"}
    with pytest.raises(ExportError, match=r"^no way$"):
        plan.lerobot_export_plan(_write(tmp_path, _config()), action_names=JOINTS)


def test_joint_names_from_the_checkpoint_or_numbered_with_a_warning(
    tmp_path: Path, stand_in: Any, caplog: pytest.LogCaptureFixture
) -> None:
    named = {"action": {"type": "ACTION", "shape": [3], "names": ["x", "y", "z"]}}
    d = _write(tmp_path, _config(output_features=named))
    with caplog.at_level(logging.WARNING, logger="runtime.export.lerobot.plan"):
        assert plan.lerobot_export_plan(d)[1]["action_names"] == ("x", "y", "z")
        assert caplog.records == []
        assert plan.lerobot_export_plan(d, action_names=("a", "b", "c"))[1]["action_names"] == ("a", "b", "c")
        d = _write(tmp_path, _config(output_features={"action": {"type": "ACTION", "shape": [3]}}))
        assert plan.lerobot_export_plan(d)[1]["action_names"] == ("joint_0", "joint_1", "joint_2")
    assert [r.getMessage() for r in caplog.records] == [
        f"{d}: no joint names in the checkpoint (LeRobot keeps them in the dataset's meta/info.json); "
        "using joint_0..joint_2: pass --action-names to name them"
    ]


def test_a_wrong_number_of_joint_names_is_refused(tmp_path: Path, stand_in: Any) -> None:
    with pytest.raises(ExportError) as e:
        plan.lerobot_export_plan(_write(tmp_path, _config()), action_names=("a", "b"))
    assert str(e.value) == "--action-names: the action has 6 values per step, 2 names given"
    assert stand_in.loads == []


def test_a_vlm_directory_and_rtc_are_for_smolvla_only(tmp_path: Path, stand_in: Any) -> None:
    d = _write(tmp_path, _config())
    with pytest.raises(ExportError) as e:
        plan.lerobot_export_plan(d, action_names=JOINTS, vlm_dir=tmp_path)
    assert str(e.value) == f"--vlm-dir: applies to SmolVLA checkpoints; {d} is a act policy"
    with pytest.raises(ExportError) as e:
        plan.lerobot_export_plan(d, action_names=JOINTS, rtc=True)
    assert str(e.value) == (
        f"--rtc: real-time chunking guides a flow-matching policy's sampling (SmolVLA); {d} is a act policy"
    )
    assert stand_in.loads == []


RTC = {
    "prefix_input": "prefix.actions",
    "weights_input": "prefix.weights",
    "guidance_input": "prefix.guidance",
    "chunk_size": 10,
    "execution_horizon": 4,
    "prefix_attention_schedule": "linear",
    "max_guidance_weight": 5.0,
}


def test_a_language_policy_with_rtc_adds_its_inputs_rtc_and_language(
    tmp_path: Path, stand_in: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _config(type="smolvla", chunk_size=10, n_action_steps=10)
    d = _write(tmp_path, cfg)
    StandIn.extras = {
        "language_inputs": {"task.tokens": ((8,), torch.int64), "task.mask": ((8,), torch.bool)},
        "noise_inputs": {"noise": (10, 6)},
        "prefix_inputs": {
            "prefix.actions": ((10, 6), "prefix"),
            "prefix.weights": ((10,), "prefix_weights"),
            "prefix.guidance": ((1,), "guidance"),
        },
        "rtc": RTC,
        "language": {"tokenizer": "definition"},
    }
    vlm = tmp_path / "vlm"
    with caplog.at_level(logging.INFO, logger="runtime.export.lerobot.plan"):
        _, kwargs = plan.lerobot_export_plan(d, action_names=JOINTS, policy_name="mine", vlm_dir=vlm, rtc=True)
    assert stand_in.loads == [("smolvla", vlm, True)]
    assert kwargs["policy_name"] == "mine"
    assert kwargs["input_roles"] == {
        "observation.images.front": "image",
        "observation.state": "state",
        "observation.environment_state": "env",
        "task.tokens": "language",
        "task.mask": "language",
        "noise": "noise",
        "prefix.actions": "prefix",
        "prefix.weights": "prefix_weights",
        "prefix.guidance": "guidance",
    }
    assert list(kwargs["input_roles"])[3:] == [
        "task.tokens",
        "task.mask",
        "noise",
        "prefix.actions",
        "prefix.weights",
        "prefix.guidance",
    ]
    assert kwargs["rtc"] == RTC
    assert kwargs["language"] == {"tokenizer": "definition"}
    assert kwargs["source"]["rtc"] == {"execution_horizon": 4, "prefix_attention_schedule": "linear"}
    assert kwargs["source"]["vlm"] == "/models/vlm"
    assert kwargs["description"] == "LeRobot smolvla policy from ckpt"
    assert [r.getMessage() for r in caplog.records] == [
        "real-time chunking: the program takes the previous chunk's leftover (prefix.actions, horizon 4, linear "
        "schedule, guidance cap 5)"
    ]


def test_a_plan_without_rtc_or_language_has_neither(tmp_path: Path, stand_in: Any) -> None:
    _, kwargs = plan.lerobot_export_plan(_write(tmp_path, _config()), action_names=JOINTS)
    assert "rtc" not in kwargs and "language" not in kwargs
    assert "rtc" not in kwargs["source"] and "vlm" not in kwargs["source"]


def _routed(monkeypatch: pytest.MonkeyPatch, current: bool) -> list[Any]:
    """export_lerobot with the stack search, the tracing (here and in a child) and the lowering stood in for."""
    import runtime.export.export as export
    import runtime.export.lerobot.stacks as stacks
    import runtime.export.lerobot.trace_child as trace_child
    from runtime.export.lerobot.stacks import Stack

    asked: list[Any] = []
    trace = SimpleNamespace(source={"kind": "lerobot"})
    stack = Stack("/py/0.6" if not current else sys.executable, "0.6.1", "5.5.4", "2.11.0", current)

    def find_stack(release: str, *, explicit: Any = None, why: str = "") -> Any:
        asked.append(("find", release, explicit))
        return stack

    monkeypatch.setattr(stacks, "find_stack", find_stack)
    monkeypatch.setattr(plan, "trace_lerobot", lambda ck, **options: asked.append(("here", options)) or trace)
    monkeypatch.setattr(trace_child, "trace_in", lambda py, ck, options: asked.append(("child", py, options)) or trace)
    monkeypatch.setattr(export, "build_bundle", lambda t, out, **options: asked.append(("build", t, out, options)))
    monkeypatch.setattr(export, "present_devices", lambda: ["CPU", "GPU"])
    return asked


def test_export_lerobot_traces_with_the_release_that_wrote_the_checkpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ck = _write(tmp_path, {**_config(), "pretrained_revision": None})  # what LeRobot 0.6 writes
    asked = _routed(monkeypatch, current=False)
    plan.export_lerobot(
        ck,
        "out",
        device="GPU",
        precision="f16",
        n_action_steps=3,
        action_names=("a",),
        control_rate_hz=15.0,
        tolerance={"f16": 0.1},
        policy_name="p",
        vlm_dir="v",
        rtc=True,
        lerobot_python="/py/0.6",
    )
    options = {"n_action_steps": 3, "action_names": ("a",), "policy_name": "p", "vlm_dir": "v", "rtc": True}
    assert asked[:2] == [("find", "0.6", "/py/0.6"), ("child", "/py/0.6", options)]
    ((what, trace, out, built),) = asked[2:]
    assert (what, out, trace.source) == ("build", "out", {"kind": "lerobot", "written_by": "0.6"})
    assert built == {"device": "GPU", "precision": "f16", "control_rate_hz": 15.0, "tolerance": {"f16": 0.1}}


def test_export_lerobot_traces_here_when_this_python_has_the_release(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ck = _write(tmp_path, _config())  # no field of a newer release: written by 0.4
    asked = _routed(monkeypatch, current=True)
    plan.export_lerobot(ck, "out")
    options = {"n_action_steps": None, "action_names": None, "policy_name": None, "vlm_dir": None, "rtc": False}
    assert asked[:2] == [("find", "0.4", None), ("here", options)]
    assert asked[2][0] == "build" and asked[2][1].source["written_by"] == "0.4"
    assert asked[2][3] == {"device": "CPU", "precision": "f32", "control_rate_hz": 30.0, "tolerance": None}


# --- the family's defaults ---


def test_a_familys_defaults_serve_the_chunk_from_its_first_step() -> None:
    ckpt = Checkpoint(Path("c"), "act", (), Feature("action", "ACTION", (2,)), 10, 4, 1, {})
    loaded = SimpleNamespace(checkpoint=ckpt, policy="the policy")

    class Plain(Family):
        policy_type = "act"
        policy_class = ("m", "C")

    family = Plain(loaded)  # type: ignore[arg-type]
    assert (family.loaded, family.policy, family.checkpoint) == (loaded, "the policy", ckpt)
    assert (family.usable_steps(), family.default_steps(), family.first_step()) == (10, 4, 0)
    assert family.check() is None
    assert (family.language_inputs(), family.language(), family.example_language()) == ({}, None, {})
    assert (family.noise_inputs(), family.prefix_inputs(), family.rtc(), family.example_prefix()) == ({}, {}, None, {})
    with pytest.raises(NotImplementedError):
        family.predict({}, {})
    with pytest.raises(NotImplementedError):
        family.predict_guided({}, {}, {})

    class Later(Plain):
        def first_step(self) -> int:
            return 3

    assert Later(loaded).usable_steps() == 7  # type: ignore[arg-type]


# --- the VLM's directory ---


def _smolvla(tmp_path: Path, vlm_model_name: Any) -> Checkpoint:
    cfg = _config(type="smolvla", vlm_model_name=vlm_model_name)
    if vlm_model_name is None:
        del cfg["vlm_model_name"]
    return read_checkpoint(_write(tmp_path, cfg))


def test_the_vlm_directory_given_must_hold_a_config(tmp_path: Path) -> None:
    ckpt = _smolvla(tmp_path, "HuggingFaceTB/SmolVLM2")
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    with pytest.raises(ExportError) as e:
        resolve_vlm(ckpt, str(vlm))
    assert str(e.value) == f"--vlm-dir: {vlm} holds no config.json (expected a SmolVLM model directory)"
    (vlm / "config.json").write_text("{}")
    assert resolve_vlm(ckpt, str(vlm)) == vlm


def test_the_vlm_named_by_the_checkpoint_as_a_local_directory(tmp_path: Path) -> None:
    vlm = tmp_path / "local-vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text("{}")
    assert resolve_vlm(_smolvla(tmp_path, str(vlm)), None) == vlm


def test_the_vlm_named_by_the_checkpoint_from_the_local_cache_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Any] = []

    def snapshot_download(name: str, **options: Any) -> str:
        asked.append((name, options))
        if name == "cached/vlm":
            return "/cache/vlm"
        raise FileNotFoundError("not cached")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert resolve_vlm(_smolvla(tmp_path, "cached/vlm"), None) == Path("/cache/vlm")
    assert asked == [("cached/vlm", {"local_files_only": True})]
    for name, shown in (("absent/vlm", "'absent/vlm'"), (None, "''")):
        ckpt = _smolvla(tmp_path, name)
        with pytest.raises(ExportError) as e:
            resolve_vlm(ckpt, None)
        assert str(e.value) == (
            f"{ckpt.path / 'config.json'}: field 'vlm_model_name': {shown} is neither a local directory nor in the "
            "local Hugging Face cache (FileNotFoundError); export runs offline: pass --vlm-dir DIR, a directory "
            "holding the VLM's config.json, processor and tokenizer files"
        )


def test_a_vlm_directory_without_a_config_is_looked_up_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vlm = tmp_path / "empty"
    vlm.mkdir()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda name, **o: f"/cache/{Path(name).name}")
    assert resolve_vlm(_smolvla(tmp_path, str(vlm)), None) == Path("/cache/empty")


# --- the action's scale ---


def _loaded(mode: Any, stats: dict[str, Any], dim: int = 3) -> Any:
    from lerobot.configs.types import FeatureType

    ckpt = Checkpoint(Path("c"), "act", (), Feature("action", "ACTION", (dim,)), 1, 1, 1, {})
    norm_map = {} if mode is None else {FeatureType.ACTION: mode, FeatureType.STATE: "other"}
    unnormalizer = SimpleNamespace(norm_map=norm_map, _tensor_stats={"action": stats, "other": {"std": torch.ones(3)}})
    return SimpleNamespace(checkpoint=ckpt, unnormalizer=unnormalizer)


def test_the_scale_of_a_mean_std_action_is_its_std_with_a_still_joint_absolute() -> None:
    from lerobot.configs.types import NormalizationMode

    stats = {"std": torch.tensor([[0.5, 0.0, 2.0]], dtype=torch.float32), "min": torch.zeros(3), "max": torch.ones(3)}
    assert action_scale(_loaded(NormalizationMode.MEAN_STD, stats)) == (
        (0.5, 1.0, 2.0),
        "action std (normalised units)",
    )


@pytest.mark.parametrize(
    ("mode", "lo", "hi"), [("MIN_MAX", "min", "max"), ("QUANTILES", "q01", "q99"), ("QUANTILE10", "q10", "q90")]
)
def test_the_scale_of_a_range_normalised_action_is_half_its_range(mode: str, lo: str, hi: str) -> None:
    from lerobot.configs.types import NormalizationMode

    stats = {
        lo: torch.tensor([-1.0, 3.0, 0.0]),
        hi: torch.tensor([1.0, 3.0, 0.25]),
        "std": torch.tensor([9.0, 9.0, 9.0]),
    }
    got = action_scale(_loaded(NormalizationMode[mode], stats))
    assert got == ((1.0, 1.0, 0.125), f"half the action {lo}..{hi} range (normalised units)")


@pytest.mark.parametrize(
    ("mode", "stats"),
    [
        (None, {"std": torch.ones(3)}),  # not in the map: identity
        ("IDENTITY", {"std": torch.ones(3)}),
        ("MEAN_STD", {"mean": torch.ones(3)}),  # no std recorded
        ("MIN_MAX", {"min": torch.zeros(3)}),  # half a range
        ("QUANTILES", {"q99": torch.ones(3), "min": torch.zeros(3), "max": torch.ones(3)}),
    ],
)
def test_an_action_without_usable_statistics_is_compared_absolutely(mode: str | None, stats: dict[str, Any]) -> None:
    from lerobot.configs.types import NormalizationMode

    got = action_scale(_loaded(None if mode is None else NormalizationMode[mode], stats, dim=2))
    assert got == ((1.0, 1.0), "absolute (the action is not normalised)")


def test_an_action_without_statistics_at_all_is_compared_absolutely() -> None:
    from lerobot.configs.types import NormalizationMode

    loaded = _loaded(NormalizationMode.MEAN_STD, {})
    loaded.unnormalizer._tensor_stats = {}
    assert action_scale(loaded) == ((1.0, 1.0, 1.0), "absolute (the action is not normalised)")
