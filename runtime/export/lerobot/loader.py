"""Loading a LeRobot checkpoint with LeRobot's own classes: the policy and its processor pipelines.

The policies' model code changes between LeRobot releases; loading it with LeRobot's own
``from_pretrained`` (never a reader of our own) keeps the exported graph right by construction, and
the parity tests against LeRobot's pipeline say when it stops being so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import logging
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import ExportError
from runtime.export.lerobot.checkpoint import Checkpoint
from runtime.export.lerobot.families import family_class
from runtime.export.lerobot.stacks import DESCRIPTIVE_FIELDS, unknown_fields
from runtime.export.lerobot.torchvision_shim import import_lerobot
from runtime.versions import package_version

log = logging.getLogger(__name__)


def policy_class(policy_type: str) -> Any:
    """LeRobot's policy class for a supported type."""
    import_lerobot()
    module, name = family_class(policy_type).policy_class
    return getattr(importlib.import_module(module), name)


@dataclass
class LoadedCheckpoint:
    """The policy and its processor pipelines, as LeRobot loads them."""

    checkpoint: Checkpoint
    policy: Any
    preprocessor: Any
    postprocessor: Any
    normalizer: Any  # the preprocessor's NormalizerProcessorStep
    unnormalizer: Any  # the postprocessor's UnnormalizerProcessorStep


def resolve_vlm(ckpt: Checkpoint, vlm_dir: str | Path | None) -> Path:
    """SmolVLA's VLM as a local directory: ``--vlm-dir``, else ``vlm_model_name`` when it is a directory,
    else that model in the local Hugging Face cache; never downloaded (export runs offline)."""
    if vlm_dir is not None:
        path = Path(vlm_dir)
        if not (path / "config.json").is_file():
            raise ExportError(f"--vlm-dir: {path} holds no config.json (expected a SmolVLM model directory)")
        return path
    name = str(ckpt.config.get("vlm_model_name", ""))
    if name and (Path(name) / "config.json").is_file():
        return Path(name)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception as e:  # not a repo id, or not in the cache: both mean the same to the user
        raise ExportError(
            f"{ckpt.path / 'config.json'}: field 'vlm_model_name': {name!r} is neither a local directory nor in the "
            f"local Hugging Face cache ({type(e).__name__}); export runs offline: pass --vlm-dir DIR, a directory "
            "holding the VLM's config.json, processor and tokenizer files"
        ) from e


@contextlib.contextmanager
def config_directory(ckpt: Checkpoint, config_class: Any) -> Iterator[Path]:
    """A directory whose ``config.json`` the installed LeRobot can parse: the checkpoint's own, or a copy
    without the fields this release does not know that only describe the hub or training (named in one
    log line). Any other unknown field is refused by name (runtime.export.lerobot.stacks)."""
    known = [f.name for f in dataclasses.fields(config_class)]
    ignored = unknown_fields(ckpt.config, known, ckpt.path / "config.json")
    if not ignored:
        yield ckpt.path
        return
    log.info(
        "%s: ignoring field(s) LeRobot %s does not know, which do not change the computation: %s",
        ckpt.path / "config.json",
        package_version("lerobot"),
        ", ".join(f"{k} ({DESCRIPTIVE_FIELDS[k]})" for k in ignored),
    )
    with tempfile.TemporaryDirectory(prefix="lerobot-config-") as tmp:
        cleaned = {k: v for k, v in ckpt.config.items() if k not in ignored}
        (Path(tmp) / "config.json").write_text(json.dumps(cleaned, indent=2))
        yield Path(tmp)


def load_checkpoint(ckpt: Checkpoint, *, vlm_dir: str | Path | None = None, rtc: bool = False) -> LoadedCheckpoint:
    """Load weights and processors from the local directory (no hub access).

    A SmolVLA checkpoint's VLM (config, processor, tokenizer; its weights when the checkpoint says
    ``load_vlm_weights``, as LeRobot loads them) comes from a local directory (see :func:`resolve_vlm`).
    ``rtc``: SmolVLA with real-time chunking enabled (its ``rtc_config``, or LeRobot's defaults when
    the checkpoint has none), as LeRobot's own RTC inference sets it.
    """
    import_lerobot()
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.processor import NormalizerProcessorStep, PolicyProcessorPipeline, UnnormalizerProcessorStep
    from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action

    cls = policy_class(ckpt.policy_type)
    kwargs: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    with config_directory(ckpt, cls.config_class) as where:
        config = PreTrainedConfig.from_pretrained(str(where), local_files_only=True)
    kwargs["config"] = config
    if ckpt.policy_type == "smolvla":
        vlm = str(resolve_vlm(ckpt, vlm_dir).resolve())
        config.vlm_model_name = vlm
        if rtc:
            from lerobot.policies.rtc.configuration_rtc import RTCConfig

            if config.rtc_config is None:
                config.rtc_config = RTCConfig()
            config.rtc_config.enabled = True
        overrides["tokenizer_processor"] = {"tokenizer_name": vlm}
    # LeRobot prints "Loading weights from local directory" to stdout, which belongs to --json output
    with contextlib.redirect_stdout(sys.stderr):
        try:
            policy = cls.from_pretrained(str(ckpt.path), local_files_only=True, **kwargs)
        except OSError as e:  # transformers: a VLM directory without the files it needs
            raise ExportError(f"{ckpt.path}: loading the policy failed: {e}") from e
    policy = policy.to("cpu").eval()
    pre = PolicyProcessorPipeline.from_pretrained(
        str(ckpt.path), config_filename="policy_preprocessor.json", local_files_only=True, overrides=overrides
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
