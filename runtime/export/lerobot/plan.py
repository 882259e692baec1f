"""The export plan for a LeRobot checkpoint: the graph factory and the ``export_bundle`` keywords.

What every family shares is decided here (the steps served, joint names, the parity scale, input
roles, the source record); what differs is asked of the family's module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from runtime.errors import ExportError
from runtime.export.lerobot.checkpoint import joint_names, read_checkpoint
from runtime.export.lerobot.families import family_class
from runtime.export.lerobot.loader import action_scale, load_checkpoint
from runtime.versions import package_version

log = logging.getLogger(__name__)

FEATURE_ROLES: Final = {"VISUAL": "image", "STATE": "state", "ENV": "env"}  # LeRobot FeatureType -> input role


def lerobot_export_plan(
    checkpoint: str | Path,
    *,
    n_action_steps: int | None = None,
    action_names: tuple[str, ...] | None = None,
    policy_name: str | None = None,
    vlm_dir: str | Path | None = None,
    rtc: bool = False,
) -> tuple[Callable[[], tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """The factory (graph and example inputs) and the ``export_bundle`` keywords for a checkpoint.

    ``rtc``: real-time chunking, as if the checkpoint's ``rtc_config.enabled`` were true (SmolVLA);
    a checkpoint that enables it gets it without."""
    ckpt = read_checkpoint(checkpoint)
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
    if vlm_dir is not None and ckpt.policy_type != "smolvla":
        raise ExportError(f"--vlm-dir: applies to SmolVLA checkpoints; {ckpt.path} is a {ckpt.policy_type} policy")
    if rtc and ckpt.policy_type != "smolvla":
        raise ExportError(
            f"--rtc: real-time chunking guides a flow-matching policy's sampling (SmolVLA); {ckpt.path} is a "
            f"{ckpt.policy_type} policy"
        )
    loaded = load_checkpoint(ckpt, vlm_dir=vlm_dir, rtc=rtc)
    family = family_class(ckpt.policy_type)(loaded)
    family.check()
    limit = family.usable_steps()
    steps = n_action_steps or family.default_steps()
    if not 1 <= steps <= limit:
        raise ExportError(
            f"--n-action-steps: expected 1..{limit} (the policy predicts {limit} usable steps), got {steps}"
        )
    scale, what = action_scale(loaded)

    def factory() -> tuple[Any, dict[str, Any]]:
        from runtime.export.lerobot.graph import LeRobotGraph, example_inputs

        return LeRobotGraph(family, steps).eval(), example_inputs(family)

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
            **{name: "language" for name in family.language_inputs()},
            **{name: "noise" for name in family.noise_inputs()},
            **{name: role for name, (_, role) in family.prefix_inputs().items()},
        },
        "observation_history": ckpt.n_obs_steps,
    }
    rtc_entry = family.rtc()
    if rtc_entry is not None:
        kwargs["rtc"] = rtc_entry
        kwargs["source"]["rtc"] = {k: rtc_entry[k] for k in ("execution_horizon", "prefix_attention_schedule")}
        log.info(
            "real-time chunking: the program takes the previous chunk's leftover (%s, horizon %d, %s schedule, "
            "guidance cap %g)",
            rtc_entry["prefix_input"],
            rtc_entry["execution_horizon"],
            rtc_entry["prefix_attention_schedule"],
            rtc_entry["max_guidance_weight"],
        )
    language = family.language()
    if language is not None:
        kwargs["language"] = language
        kwargs["source"]["vlm"] = str(loaded.policy.config.vlm_model_name)
    return factory, kwargs


def trace_lerobot(
    checkpoint: str | Path,
    *,
    n_action_steps: int | None = None,
    action_names: tuple[str, ...] | None = None,
    policy_name: str | None = None,
    vlm_dir: str | Path | None = None,
    rtc: bool = False,
) -> Any:
    """The tracing half of exporting a checkpoint, in this Python: the plan's graph traced (a Trace)."""
    from runtime.export.trace import trace_policy

    factory, kwargs = lerobot_export_plan(
        checkpoint,
        n_action_steps=n_action_steps,
        action_names=action_names,
        policy_name=policy_name,
        vlm_dir=vlm_dir,
        rtc=rtc,
    )
    return trace_policy(factory, steps=(1, 5), **kwargs)


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
    vlm_dir: str | Path | None = None,
    rtc: bool = False,
    lerobot_python: str | None = None,
) -> Any:
    """``lerobot-runtime export --lerobot CHECKPOINT``: the checkpoint's inference path as a bundle.

    Traced by the LeRobot release that wrote the checkpoint (runtime.export.lerobot.stacks): here when
    this Python has it, else in a child on the Python that does; lowered and proved here."""
    from runtime.export.export import build_bundle, check_device_present, check_precision
    from runtime.export.lerobot.stacks import find_stack, written_by

    check_device_present(device)
    check_precision(precision)
    ckpt = read_checkpoint(checkpoint)
    release = written_by(ckpt.config)
    stack = find_stack(release, explicit=lerobot_python, why=f"{ckpt.path}: ")
    options: dict[str, Any] = {
        "n_action_steps": n_action_steps,
        "action_names": action_names,
        "policy_name": policy_name,
        "vlm_dir": str(vlm_dir) if vlm_dir is not None else None,
        "rtc": rtc,
    }
    log.info("%s: written by LeRobot %s.x; traced with %s", ckpt.path, release, stack.describe())
    if stack.current:
        trace = trace_lerobot(ckpt.path, **options)
    else:
        from runtime.export.lerobot.trace_child import trace_in

        trace = trace_in(stack.python, ckpt.path, options)
    trace.source["written_by"] = release
    return build_bundle(
        trace, out, device=device, precision=precision, control_rate_hz=control_rate_hz, tolerance=tolerance
    )
