"""Reading a LeRobot checkpoint directory's ``config.json`` without importing LeRobot or torch.

A checkpoint is what LeRobot's training writes (``policy.save_pretrained`` plus the pre- and
post-processor's ``save_pretrained``). Its features, chunk and observation history are validated
here, so a wrong checkpoint is refused in milliseconds, naming the field, before any model loads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from runtime.errors import ExportError
from runtime.export.lerobot.families import FAMILIES, SUPPORTED_POLICIES

CHECKPOINT_FILES: Final = (
    "config.json",
    "model.safetensors",
    "policy_preprocessor.json",
    "policy_postprocessor.json",
)


@dataclass(frozen=True)
class Feature:
    name: str
    type: str  # LeRobot's FeatureType name: VISUAL, STATE, ENV, ACTION
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Checkpoint:
    """What ``config.json`` says, validated without importing LeRobot."""

    path: Path
    policy_type: str
    inputs: tuple[Feature, ...]
    action: Feature
    chunk_size: int  # steps the policy predicts per call (config.json: the family's chunk_field)
    n_action_steps: int  # steps LeRobot executes from each chunk
    n_obs_steps: int
    config: Mapping[str, Any]


def _fail(path: Path, field: str, expected: str, got: Any) -> ExportError:
    return ExportError(f"{path / 'config.json'}: field '{field}': expected {expected}, got {got!r}")


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Check the checkpoint directory's files and read its config, naming what is missing or wrong."""
    p = Path(path)
    if not p.is_dir():
        raise ExportError(
            f"--lerobot: {p} is not a directory (expected a LeRobot checkpoint: {', '.join(CHECKPOINT_FILES)})"
        )
    missing = [f for f in CHECKPOINT_FILES if not (p / f).is_file()]
    if missing:
        raise ExportError(
            f"--lerobot: {p} lacks {', '.join(missing)}; a LeRobot >= 0.4 checkpoint holds "
            f"{', '.join(CHECKPOINT_FILES)} "
            "(policy.save_pretrained plus the pre- and post-processor's save_pretrained)"
        )
    try:
        cfg = json.loads((p / "config.json").read_text())
    except json.JSONDecodeError as e:
        raise ExportError(f"{p / 'config.json'}: not valid JSON: {e}") from e
    if not isinstance(cfg, dict):
        raise _fail(p, "(top level)", "a JSON object", type(cfg).__name__)
    ptype = cfg.get("type")
    if ptype not in SUPPORTED_POLICIES:
        raise _fail(p, "type", f"a supported policy type ({', '.join(SUPPORTED_POLICIES)})", ptype)
    family = FAMILIES[ptype]

    def features(key: str) -> list[Feature]:
        raw = cfg.get(key)
        if not isinstance(raw, dict) or not raw:
            raise _fail(p, key, "an object of feature name -> {type, shape}", raw)
        out = []
        for name, f in raw.items():
            ok = isinstance(f, dict) and isinstance(f.get("type"), str) and isinstance(f.get("shape"), list)
            if not ok or not all(isinstance(d, int) and d > 0 for d in f["shape"]):
                raise _fail(p, f"{key}.{name}", "{type: VISUAL|STATE|ENV|ACTION, shape: [positive ints]}", f)
            out.append(Feature(name, f["type"], tuple(f["shape"])))
        return out

    inputs = features("input_features")
    for f in inputs:
        if f.type not in ("VISUAL", "STATE", "ENV"):
            raise _fail(p, f"input_features.{f.name}.type", "VISUAL, STATE or ENV", f.type)
        if f.type == "VISUAL" and (len(f.shape) != 3 or f.shape[0] != 3):
            raise _fail(p, f"input_features.{f.name}.shape", "[3, height, width] (an RGB camera)", list(f.shape))
    actions = [f for f in features("output_features") if f.type == "ACTION"]
    if len(actions) != 1 or len(actions[0].shape) != 1:
        raise _fail(
            p, "output_features", "exactly one ACTION feature of shape [action_dim]", cfg.get("output_features")
        )
    chunk = cfg.get(family.chunk_field)
    steps = cfg.get(family.steps_field)
    n_obs = cfg.get("n_obs_steps", 1)
    for field, value in ((family.chunk_field, chunk), (family.steps_field, steps), ("n_obs_steps", n_obs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _fail(p, field, "a positive integer", value)
    assert isinstance(chunk, int) and isinstance(steps, int) and isinstance(n_obs, int)
    return Checkpoint(p, ptype, tuple(inputs), actions[0], chunk, steps, n_obs, cfg)


def joint_names(ckpt: Checkpoint) -> tuple[str, ...] | None:
    """The action's joint names from the checkpoint's features, or from the dataset it was trained on.

    LeRobot 0.4 checkpoints keep feature shapes, not names; a training run's ``train_config.json``
    names its dataset, whose ``meta/info.json`` has them (``features.action.names``).
    """
    names = ckpt.config.get("output_features", {}).get(ckpt.action.name, {}).get("names")
    if isinstance(names, list):
        return tuple(str(n) for n in names)
    train = ckpt.path / "train_config.json"
    if not train.is_file():
        return None
    try:
        root = json.loads(train.read_text()).get("dataset", {}).get("root")
        info = json.loads((Path(root) / "meta" / "info.json").read_text()) if root else {}
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    names = info.get("features", {}).get(ckpt.action.name, {}).get("names")
    return tuple(str(n) for n in names) if isinstance(names, list) else None
