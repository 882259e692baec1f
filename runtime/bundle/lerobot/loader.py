"""Loading a LeRobot checkpoint with LeRobot's own classes: the policy and its processor pipelines.

The policies' model code changes between LeRobot releases; loading it with LeRobot's own
``from_pretrained`` (never a reader of our own) keeps the exported graph right by construction, and
the parity tests against LeRobot's pipeline say when it stops being so.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from dataclasses import dataclass
from typing import Any

from runtime.bundle.lerobot.checkpoint import Checkpoint
from runtime.bundle.lerobot.families import family_class
from runtime.bundle.lerobot.torchvision_shim import import_lerobot
from runtime.errors import ExportError


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


def load_checkpoint(ckpt: Checkpoint) -> LoadedCheckpoint:
    """Load weights and processors from the local directory (no hub access)."""
    import_lerobot()
    from lerobot.processor import NormalizerProcessorStep, PolicyProcessorPipeline, UnnormalizerProcessorStep
    from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action

    # LeRobot prints "Loading weights from local directory" to stdout, which belongs to --json output
    with contextlib.redirect_stdout(sys.stderr):
        policy = policy_class(ckpt.policy_type).from_pretrained(str(ckpt.path), local_files_only=True)
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
