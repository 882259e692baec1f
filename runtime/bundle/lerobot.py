"""From a LeRobot checkpoint directory (what ``save_pretrained`` writes) to an exportable graph.

The checkpoint is read with LeRobot's own classes (the ``lerobot`` extra), not re-implemented: the
policies' model code changes between LeRobot releases and a reader of our own would drift from it
silently, while LeRobot's own code stays right by construction, and the parity test compares against
it. The price is LeRobot's torch pin (0.4.4 asks for torch<2.11, ExecuTorch 1.5.1 needs 2.13), so it is
installed beside us with ``--no-deps`` (see docs/lerobot.md); it is needed only to export, never on
the robot.

The graph built here is the whole inference path of LeRobot's own pipeline, so a client sends what a
robot delivers and gets joint targets back:

* camera frames as ``uint8`` height x width x 3 (the /255 and the HWC->CHW change are in the graph, as
  ``lerobot.policies.utils.prepare_observation_for_inference`` does them);
* the preprocessor's normalisation (LeRobot's ``NormalizerProcessorStep``, with the checkpoint's stats);
* the batch of one LeRobot policies take, added and removed inside the graph;
* the policy's ``predict_action_chunk`` (for Diffusion Policy, the sampling loop with its noise as an
  input; see runtime.bundle.lerobot_diffusion);
* the postprocessor's un-normalisation.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from runtime.errors import ExportError, MissingDependencyError
from runtime.versions import package_version

log = logging.getLogger(__name__)

# LeRobot releases whose checkpoint format (config.json + processor pipelines) this reader knows.
SUPPORTED_LEROBOT: Final = ("0.4",)
SUPPORTED_POLICIES: Final = ("act", "diffusion")
CHECKPOINT_FILES: Final = (
    "config.json",
    "model.safetensors",
    "policy_preprocessor.json",
    "policy_postprocessor.json",
)
NOISE_INPUT: Final = "noise"  # Diffusion Policy's initial sample, filled per request by the server
FEATURE_ROLES: Final = {"VISUAL": "image", "STATE": "state", "ENV": "env"}  # LeRobot FeatureType -> input role

INSTALL_HINT: Final = (
    "pip install --no-deps lerobot==0.4.4 && pip install 'lerobot-runtime[lerobot]' "
    "(LeRobot pins an older torch than ExecuTorch needs, so it goes in without its dependencies)"
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
    chunk_size: int  # steps the policy predicts (Diffusion: horizon)
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
    chunk = cfg.get("chunk_size") if ptype == "act" else cfg.get("horizon")
    steps = cfg.get("n_action_steps")
    n_obs = cfg.get("n_obs_steps", 1)
    for field, value in (
        ("chunk_size" if ptype == "act" else "horizon", chunk),
        ("n_action_steps", steps),
        ("n_obs_steps", n_obs),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _fail(p, field, "a positive integer", value)
    assert isinstance(chunk, int) and isinstance(steps, int) and isinstance(n_obs, int)
    return Checkpoint(p, ptype, tuple(inputs), actions[0], chunk, steps, n_obs, cfg)


def _shim_torchvision() -> None:
    """Let PyPI's torchvision import beside a CPU-only torch.

    PyPI's torchvision wheel is a CUDA build; beside CPU torch its C extension does not load, and its
    import then fails registering fake kernels for ``torchvision::nms``/``qnms``, operators the
    extension would have defined. Defining just those two schemas lets the import finish; the
    policies use only the models, never those operators.
    """
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None or "torchvision" in sys.modules:
        return
    import torch

    lib = Path(spec.origin).parent / "_C.so"
    try:
        torch.ops.load_library(str(lib))  # type: ignore[no-untyped-call]
        return
    except (OSError, RuntimeError) as e:
        log.debug("torchvision's C extension does not load here (%s); defining nms/qnms schemas", e)
    global _TORCHVISION_SHIM
    if _TORCHVISION_SHIM is None:
        _TORCHVISION_SHIM = torch.library.Library("torchvision", "FRAGMENT")  # type: ignore[no-untyped-call]
        _TORCHVISION_SHIM.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TORCHVISION_SHIM.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")


_TORCHVISION_SHIM: Any = None


def lerobot_available() -> str | None:
    """None when LeRobot can be used here, else why not (for skips and errors)."""
    version = package_version("lerobot")
    if version in ("", "not installed"):
        return f"LeRobot is not installed ({INSTALL_HINT})"
    if not version.startswith(SUPPORTED_LEROBOT):
        return f"LeRobot {version} is installed; this exporter reads {', '.join(v + '.x' for v in SUPPORTED_LEROBOT)}"
    try:
        import_lerobot()
    except MissingDependencyError as e:
        return str(e)
    return None


def import_lerobot() -> Any:
    """The ``lerobot`` package, imported with the torchvision shim; tells what to install otherwise."""
    try:
        _shim_torchvision()
        # LeRobot logs through absl/torchao warnings at import; they are not ours
        os.environ.setdefault("TORCHAO_NO_WARNINGS", "1")
        return importlib.import_module("lerobot")
    except ImportError as e:
        raise MissingDependencyError(f"exporting a LeRobot checkpoint needs LeRobot ({e}): {INSTALL_HINT}") from e


def _policy_class(policy_type: str) -> Any:
    import_lerobot()
    mod, cls = {
        "act": ("lerobot.policies.act.modeling_act", "ACTPolicy"),
        "diffusion": ("lerobot.policies.diffusion.modeling_diffusion", "DiffusionPolicy"),
    }[policy_type]
    return getattr(importlib.import_module(mod), cls)


@dataclass
class LoadedCheckpoint:
    """The policy and its processor pipelines, as LeRobot loads them."""

    checkpoint: Checkpoint
    policy: Any
    preprocessor: Any
    postprocessor: Any
    normalizer: Any  # the preprocessor's NormalizerProcessorStep
    unnormalizer: Any  # the postprocessor's UnnormalizerProcessorStep


def load_checkpoint(ckpt: Checkpoint) -> LoadedCheckpoint:
    """Load weights and processors from the local directory (no hub access)."""
    import_lerobot()
    from lerobot.processor import NormalizerProcessorStep, PolicyProcessorPipeline, UnnormalizerProcessorStep
    from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action

    # LeRobot prints "Loading weights from local directory" to stdout, which belongs to --json output
    with contextlib.redirect_stdout(sys.stderr):
        policy = _policy_class(ckpt.policy_type).from_pretrained(str(ckpt.path), local_files_only=True)
    policy = policy.to("cpu").eval()
    pre = PolicyProcessorPipeline.from_pretrained(
        str(ckpt.path), config_filename="policy_preprocessor.json", local_files_only=True
    )
    post = PolicyProcessorPipeline.from_pretrained(
        str(ckpt.path),
        config_filename="policy_postprocessor.json",
        local_files_only=True,
        to_transition=policy_action_to_transition,
        to_output=transition_to_policy_action,
    )
    norm = next((s for s in pre.steps if isinstance(s, NormalizerProcessorStep)), None)
    unnorm = next((s for s in post.steps if isinstance(s, UnnormalizerProcessorStep)), None)
    if norm is None or unnorm is None:
        raise ExportError(
            f"{ckpt.path}: policy_preprocessor.json has no normalizer_processor step or policy_postprocessor.json "
            "no unnormalizer_processor step; the exporter puts both inside the graph and needs them"
        )
    for step in (norm, unnorm):
        step.to(device="cpu", dtype=None)
    return LoadedCheckpoint(ckpt, policy, pre, post, norm, unnorm)


def action_scale(loaded: LoadedCheckpoint) -> tuple[tuple[float, ...], str]:
    """One divisor per joint that turns an action error into normalised units, and what it is."""
    from lerobot.configs.types import FeatureType, NormalizationMode

    unnorm = loaded.unnormalizer
    mode = unnorm.norm_map.get(FeatureType.ACTION, NormalizationMode.IDENTITY)
    stats = unnorm._tensor_stats.get(loaded.checkpoint.action.name, {})
    pairs = {
        NormalizationMode.MIN_MAX: ("min", "max"),
        NormalizationMode.QUANTILES: ("q01", "q99"),
        NormalizationMode.QUANTILE10: ("q10", "q90"),
    }
    dim = loaded.checkpoint.action.shape[0]
    if mode == NormalizationMode.MEAN_STD and "std" in stats:
        values = stats["std"].double().reshape(-1).tolist()
        what = "action std (normalised units)"
    elif mode in pairs and all(k in stats for k in pairs[mode]):
        lo, hi = pairs[mode]
        values = ((stats[hi] - stats[lo]).double().reshape(-1) / 2).tolist()
        what = f"half the action {lo}..{hi} range (normalised units)"
    else:
        return tuple([1.0] * dim), "absolute (the action is not normalised)"
    # a joint that never moved in the data has std 0; LeRobot divides by eps there, we compare absolutely
    return tuple(v if v > 0 else 1.0 for v in values), what


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


def lerobot_export_plan(
    checkpoint: str | Path,
    *,
    n_action_steps: int | None = None,
    action_names: tuple[str, ...] | None = None,
    policy_name: str | None = None,
) -> tuple[Callable[[], tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """The factory (graph and example inputs) and the ``export_bundle`` keywords for a checkpoint."""
    ckpt = read_checkpoint(checkpoint)
    limit = ckpt.chunk_size - (ckpt.n_obs_steps - 1 if ckpt.policy_type == "diffusion" else 0)
    steps = n_action_steps or ckpt.n_action_steps
    if not 1 <= steps <= limit:
        raise ExportError(
            f"--n-action-steps: expected 1..{limit} (the policy predicts {limit} usable steps), got {steps}"
        )
    dim = ckpt.action.shape[0]
    names = action_names or joint_names(ckpt)
    if names is None:
        names = tuple(f"joint_{i}" for i in range(dim))
        log.warning(
            "%s: no joint names in the checkpoint (LeRobot keeps them in the dataset's meta/info.json); "
            "using %s..%s: pass --action-names to name them",
            ckpt.path,
            names[0],
            names[-1],
        )
    if len(names) != dim:
        raise ExportError(f"--action-names: the action has {dim} values per step, {len(names)} names given")
    loaded = load_checkpoint(ckpt)
    if ckpt.policy_type == "diffusion":
        from runtime.bundle.lerobot_diffusion import check_scheduler

        check_scheduler(loaded.policy)
    scale, what = action_scale(loaded)

    def factory() -> tuple[Any, dict[str, Any]]:
        from runtime.bundle.lerobot_graph import LeRobotGraph, example_inputs

        return LeRobotGraph(loaded, steps).eval(), example_inputs(loaded)

    kwargs: dict[str, Any] = {
        "policy_name": policy_name or f"lerobot_{ckpt.policy_type}",
        "action_names": names,
        "image_inputs": tuple(f.name for f in ckpt.inputs if f.type == "VISUAL"),
        "action_scale": scale,
        "scale_source": what,
        "source": {
            "kind": "lerobot",
            "policy_type": ckpt.policy_type,
            "lerobot_version": package_version("lerobot"),
            "checkpoint": str(ckpt.path.resolve()),
            "chunk_size": ckpt.chunk_size,
            "n_action_steps": steps,
            "n_obs_steps": ckpt.n_obs_steps,
        },
        "description": f"LeRobot {ckpt.policy_type} policy from {ckpt.path.name}",
        "model_batch": 1,  # LeRobot policies take a batch; the graph adds and removes it
        # from the checkpoint's feature types, not the names: the server keeps history for these roles
        "input_roles": {
            **{f.name: FEATURE_ROLES[f.type] for f in ckpt.inputs},
            **({NOISE_INPUT: "noise"} if ckpt.policy_type == "diffusion" else {}),
        },
        "observation_history": ckpt.n_obs_steps,
    }
    return factory, kwargs


def export_lerobot(
    checkpoint: str | Path,
    out: str | Path,
    *,
    device: str = "CPU",
    precision: str = "f32",
    n_action_steps: int | None = None,
    action_names: tuple[str, ...] | None = None,
    control_rate_hz: float = 30.0,
    tolerance: Mapping[str, float] | None = None,
    policy_name: str | None = None,
) -> Any:
    """``lerobot-runtime export --lerobot CHECKPOINT``: the checkpoint's inference path as a bundle."""
    from runtime.bundle.export import export_bundle

    factory, kwargs = lerobot_export_plan(
        checkpoint, n_action_steps=n_action_steps, action_names=action_names, policy_name=policy_name
    )
    return export_bundle(
        factory,
        out,
        device=device,
        precision=precision,
        control_rate_hz=control_rate_hz,
        tolerance=tolerance,
        **kwargs,
    )
