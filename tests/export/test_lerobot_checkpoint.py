"""A LeRobot checkpoint's ``config.json`` read without LeRobot or torch: every refusal word for word,
what is read, the joint names, and the supported families. Configs written in the test (no model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import ExportError
from runtime.export.lerobot.checkpoint import CHECKPOINT_FILES, Checkpoint, Feature, joint_names, read_checkpoint
from runtime.export.lerobot.families import FAMILIES, SUPPORTED_POLICIES, FamilyConfig, family_class

FILES = "config.json, model.safetensors, policy_preprocessor.json, policy_postprocessor.json"


def _config(**changes: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "type": "act",
        "n_obs_steps": 2,
        "chunk_size": 10,
        "n_action_steps": 5,
        "input_features": {
            "observation.images.front": {"type": "VISUAL", "shape": [3, 48, 64]},
            "observation.state": {"type": "STATE", "shape": [6]},
            "observation.environment_state": {"type": "ENV", "shape": [2]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [6]}},
    }
    cfg.update(changes)
    return cfg


def _write(tmp_path: Path, cfg: Any) -> Path:
    d = tmp_path / "ckpt"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    for f in ("model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"):
        (d / f).write_text("{}")
    return d


def _refusal(tmp_path: Path, cfg: Any) -> str:
    d = _write(tmp_path, cfg)
    with pytest.raises(ExportError) as e:
        read_checkpoint(d)
    prefix = f"{d / 'config.json'}: "
    assert str(e.value).startswith(prefix)
    return str(e.value).removeprefix(prefix)


def test_a_checkpoint_is_read_whole(tmp_path: Path) -> None:
    cfg = _config()
    d = _write(tmp_path, cfg)
    assert read_checkpoint(str(d)) == Checkpoint(
        path=d,
        policy_type="act",
        inputs=(
            Feature("observation.images.front", "VISUAL", (3, 48, 64)),
            Feature("observation.state", "STATE", (6,)),
            Feature("observation.environment_state", "ENV", (2,)),
        ),
        action=Feature("action", "ACTION", (6,)),
        chunk_size=10,
        n_action_steps=5,
        n_obs_steps=2,
        config=cfg,
    )
    assert tuple(FILES.split(", ")) == CHECKPOINT_FILES


@pytest.mark.parametrize(
    ("policy_type", "fields", "chunk", "steps"),
    [
        ("diffusion", {"horizon": 16, "n_action_steps": 8}, 16, 8),
        ("tdmpc", {"horizon": 5, "n_action_steps": 5}, 5, 5),
        ("vqbet", {"action_chunk_size": 7}, 7, 7),
        ("smolvla", {"chunk_size": 50, "n_action_steps": 50}, 50, 50),
    ],
)
def test_each_family_reads_its_chunk_and_steps_from_its_own_fields(
    tmp_path: Path, policy_type: str, fields: dict[str, int], chunk: int, steps: int
) -> None:
    cfg = _config(type=policy_type, **fields)
    del cfg["chunk_size"], cfg["n_action_steps"]
    cfg.update(fields)
    ckpt = read_checkpoint(_write(tmp_path, cfg))
    assert (ckpt.policy_type, ckpt.chunk_size, ckpt.n_action_steps) == (policy_type, chunk, steps)


def test_n_obs_steps_is_one_when_the_config_leaves_it_out(tmp_path: Path) -> None:
    cfg = _config()
    del cfg["n_obs_steps"]
    assert read_checkpoint(_write(tmp_path, cfg)).n_obs_steps == 1


def test_a_path_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for p in (tmp_path / "file", tmp_path / "absent"):
        with pytest.raises(ExportError) as e:
            read_checkpoint(p)
        assert str(e.value) == f"--lerobot: {p} is not a directory (expected a LeRobot checkpoint: {FILES})"


def test_missing_files_are_listed_in_order(tmp_path: Path) -> None:
    d = _write(tmp_path, _config())
    (d / "model.safetensors").unlink()
    (d / "model.safetensors").mkdir()  # a directory is not the file
    (d / "policy_postprocessor.json").unlink()
    with pytest.raises(ExportError) as e:
        read_checkpoint(d)
    assert str(e.value) == (
        f"--lerobot: {d} lacks model.safetensors, policy_postprocessor.json; a LeRobot >= 0.4 checkpoint holds "
        f"{FILES} (policy.save_pretrained plus the pre- and post-processor's save_pretrained)"
    )


def test_a_config_that_is_not_json_or_not_an_object_is_refused(tmp_path: Path) -> None:
    d = _write(tmp_path, _config())
    (d / "config.json").write_text("{")
    with pytest.raises(ExportError) as e:
        read_checkpoint(d)
    assert str(e.value) == (
        f"{d / 'config.json'}: not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1)"
    )
    assert _refusal(tmp_path, [1]) == "field '(top level)': expected a JSON object, got 'list'"


@pytest.mark.parametrize(("value", "shown"), [("pi0", "'pi0'"), (None, "None")])
def test_an_unsupported_policy_type_is_refused(tmp_path: Path, value: Any, shown: str) -> None:
    cfg = _config(type=value) if value else {k: v for k, v in _config().items() if k != "type"}
    assert _refusal(tmp_path, cfg) == (
        f"field 'type': expected a supported policy type (act, diffusion, tdmpc, vqbet, smolvla), got {shown}"
    )


@pytest.mark.parametrize("key", ["input_features", "output_features"])
@pytest.mark.parametrize("value", [None, {}, ["a"]])
def test_features_that_are_not_a_nonempty_object_are_refused(tmp_path: Path, key: str, value: Any) -> None:
    cfg = _config(**{key: value})
    if value is None:
        del cfg[key]
    assert (
        _refusal(tmp_path, cfg)
        == f"field '{key}': expected an object of feature name -> {{type, shape}}, got {value!r}"
    )


@pytest.mark.parametrize(
    "feature",
    [
        "STATE",
        {"shape": [6]},
        {"type": 1, "shape": [6]},
        {"type": "STATE"},
        {"type": "STATE", "shape": 6},
        {"type": "STATE", "shape": [6, 0]},
        {"type": "STATE", "shape": [-1]},
        {"type": "STATE", "shape": [6.0]},
    ],
)
def test_a_malformed_feature_is_refused_naming_it(tmp_path: Path, feature: Any) -> None:
    cfg = _config(input_features={"observation.state": feature})
    shown = json.loads(json.dumps(feature))  # as read back from the file
    assert _refusal(tmp_path, cfg) == (
        f"field 'input_features.observation.state': expected {{type: VISUAL|STATE|ENV|ACTION, shape: "
        f"[positive ints]}}, got {shown!r}"
    )


def test_an_action_among_the_inputs_is_refused(tmp_path: Path) -> None:
    cfg = _config(
        input_features={"observation.state": {"type": "STATE", "shape": [6]}, "a": {"type": "ACTION", "shape": [6]}}
    )
    assert _refusal(tmp_path, cfg) == "field 'input_features.a.type': expected VISUAL, STATE or ENV, got 'ACTION'"


@pytest.mark.parametrize("shape", [[3, 48], [1, 48, 64], [3, 48, 64, 1]])
def test_a_camera_that_is_not_rgb_height_width_is_refused(tmp_path: Path, shape: list[int]) -> None:
    cfg = _config(input_features={"cam": {"type": "VISUAL", "shape": shape}})
    assert _refusal(tmp_path, cfg) == (
        f"field 'input_features.cam.shape': expected [3, height, width] (an RGB camera), got {shape!r}"
    )


@pytest.mark.parametrize(
    "outputs",
    [
        {"state": {"type": "STATE", "shape": [6]}},
        {"a": {"type": "ACTION", "shape": [6]}, "b": {"type": "ACTION", "shape": [6]}},
        {"a": {"type": "ACTION", "shape": [2, 3]}},
    ],
)
def test_the_outputs_must_hold_one_vector_action(tmp_path: Path, outputs: dict[str, Any]) -> None:
    assert _refusal(tmp_path, _config(output_features=outputs)) == (
        f"field 'output_features': expected exactly one ACTION feature of shape [action_dim], got {outputs!r}"
    )


def test_other_outputs_beside_the_action_are_ignored(tmp_path: Path) -> None:
    outputs = {"value": {"type": "REWARD", "shape": [1]}, "action": {"type": "ACTION", "shape": [4]}}
    assert read_checkpoint(_write(tmp_path, _config(output_features=outputs))).action == Feature(
        "action", "ACTION", (4,)
    )


@pytest.mark.parametrize("field", ["chunk_size", "n_action_steps", "n_obs_steps"])
@pytest.mark.parametrize("value", [0, -1, True, 2.0, "2", None])
def test_the_chunk_steps_and_history_must_be_positive_integers(tmp_path: Path, field: str, value: Any) -> None:
    cfg = _config(**{field: value})
    if value is None and field != "n_obs_steps":
        del cfg[field]
    assert _refusal(tmp_path, cfg) == f"field '{field}': expected a positive integer, got {value!r}"


def test_a_vqbet_chunk_is_named_by_its_own_field(tmp_path: Path) -> None:
    cfg = _config(type="vqbet", action_chunk_size=0)
    assert _refusal(tmp_path, cfg) == "field 'action_chunk_size': expected a positive integer, got 0"


def test_one_step_and_one_frame_are_enough(tmp_path: Path) -> None:
    ckpt = read_checkpoint(_write(tmp_path, _config(chunk_size=1, n_action_steps=1, n_obs_steps=1)))
    assert (ckpt.chunk_size, ckpt.n_action_steps, ckpt.n_obs_steps) == (1, 1, 1)


# --- joint names ---


def _ckpt(tmp_path: Path, **changes: Any) -> Checkpoint:
    return read_checkpoint(_write(tmp_path, _config(**changes)))


def test_joint_names_from_the_action_feature(tmp_path: Path) -> None:
    outputs = {"action": {"type": "ACTION", "shape": [2], "names": ["a", 1]}}
    assert joint_names(_ckpt(tmp_path, output_features=outputs)) == ("a", "1")


def _dataset(tmp_path: Path, info: Any) -> Path:
    root = tmp_path / "dataset"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    return root


def test_joint_names_from_the_training_dataset(tmp_path: Path) -> None:
    ckpt = _ckpt(tmp_path)
    assert joint_names(ckpt) is None  # no train_config.json
    root = _dataset(tmp_path, {"features": {"action": {"names": ["x", "y"]}}})
    (ckpt.path / "train_config.json").write_text(json.dumps({"dataset": {"root": str(root)}}))
    assert joint_names(ckpt) == ("x", "y")


def test_names_that_are_not_a_list_in_the_config_fall_back_to_the_dataset(tmp_path: Path) -> None:
    outputs = {"action": {"type": "ACTION", "shape": [2], "names": "x,y"}}
    ckpt = _ckpt(tmp_path, output_features=outputs)
    root = _dataset(tmp_path, {"features": {"action": {"names": ["x", 2]}}})
    (ckpt.path / "train_config.json").write_text(json.dumps({"dataset": {"root": str(root)}}))
    assert joint_names(ckpt) == ("x", "2")


@pytest.mark.parametrize(
    "train",
    [
        "{",  # not JSON
        json.dumps({}),  # no dataset
        json.dumps({"dataset": {}}),  # no root
        json.dumps({"dataset": {"root": ""}}),
        json.dumps({"dataset": "lerobot/so101"}),  # not an object
        json.dumps({"dataset": {"root": "/nonexistent/dataset"}}),
    ],
)
def test_no_joint_names_when_the_training_config_does_not_lead_to_them(tmp_path: Path, train: str) -> None:
    ckpt = _ckpt(tmp_path)
    (ckpt.path / "train_config.json").write_text(train)
    assert joint_names(ckpt) is None


@pytest.mark.parametrize(
    "info", [{}, {"features": {}}, {"features": {"action": {}}}, {"features": {"action": {"names": "x"}}}]
)
def test_no_joint_names_when_the_dataset_has_none(tmp_path: Path, info: Any) -> None:
    ckpt = _ckpt(tmp_path)
    root = _dataset(tmp_path, info)
    (ckpt.path / "train_config.json").write_text(json.dumps({"dataset": {"root": str(root)}}))
    assert joint_names(ckpt) is None


def test_a_dataset_info_that_is_not_json_gives_no_names(tmp_path: Path) -> None:
    ckpt = _ckpt(tmp_path)
    root = _dataset(tmp_path, {})
    (root / "meta" / "info.json").write_text("{")
    (ckpt.path / "train_config.json").write_text(json.dumps({"dataset": {"root": str(root)}}))
    assert joint_names(ckpt) is None


# --- the families ---


def test_the_supported_families_and_their_fields() -> None:
    assert SUPPORTED_POLICIES == ("act", "diffusion", "tdmpc", "vqbet", "smolvla")
    assert {
        "act": FamilyConfig("runtime.export.lerobot.act", "chunk_size", "n_action_steps"),
        "diffusion": FamilyConfig("runtime.export.lerobot.diffusion", "horizon", "n_action_steps"),
        "tdmpc": FamilyConfig("runtime.export.lerobot.tdmpc", "horizon", "n_action_steps"),
        "vqbet": FamilyConfig("runtime.export.lerobot.vqbet", "action_chunk_size", "action_chunk_size"),
        "smolvla": FamilyConfig("runtime.export.lerobot.smolvla", "chunk_size", "n_action_steps"),
    } == FAMILIES


def test_each_type_has_its_family_class_and_lerobot_class() -> None:
    classes = {t: family_class(t) for t in SUPPORTED_POLICIES}
    assert {t: (c.__name__, c.policy_type) for t, c in classes.items()} == {
        "act": ("ActFamily", "act"),
        "diffusion": ("DiffusionFamily", "diffusion"),
        "tdmpc": ("TdmpcFamily", "tdmpc"),
        "vqbet": ("VqbetFamily", "vqbet"),
        "smolvla": ("SmolvlaFamily", "smolvla"),
    }
    assert classes["act"].policy_class == ("lerobot.policies.act.modeling_act", "ACTPolicy")
