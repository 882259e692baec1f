"""What a reload (SIGHUP) may change in a running daemon, and what needs a restart.

Safe to apply in place: the ``[daemon]`` timings, and the policy itself (``[engine]``, or a bundle
whose manifest changed on disk, as ``lerobot-runtime bundle install`` leaves it): a new engine is
loaded beside the running one and takes over only once its parity gate passed. Not safe: the
endpoints and keys clients connect with (``[server]``) and the arm's port and calibration (``[arm]``),
and the control loop (``[control]``), which would drop clients or the arm mid-motion; those are named
as needing a restart.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.config import DaemonConfig

RESTART_SECTIONS = ("policy", "server", "arm", "control", "metrics")


def changed_keys(old: Any, new: Any, prefix: str) -> list[str]:
    """Dotted names of the config fields that differ between two config dataclasses."""
    if not (dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new)):
        return [prefix] if old != new else []
    keys: list[str] = []
    for f in dataclasses.fields(old):
        keys += changed_keys(getattr(old, f.name), getattr(new, f.name), f"{prefix}.{f.name}" if prefix else f.name)
    return keys


def bundle_identity(bundle: str) -> str:
    """sha256 of the configured bundle's manifest ("" for the built-in one or an unreadable one)."""
    if not bundle:
        return ""
    try:
        return hashlib.sha256((Path(bundle).expanduser() / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        return ""


@dataclass(frozen=True)
class ReloadPlan:
    daemon_keys: list[str]  # applied at once
    engine_keys: list[str]  # the engine is reloaded when these changed or the bundle did
    bundle_changed: bool
    restart_keys: list[str]  # left as they are until the next restart

    @property
    def reload_engine(self) -> bool:
        return bool(self.engine_keys) or self.bundle_changed

    def describe(self) -> str:
        parts = []
        applied = list(self.daemon_keys)
        if self.reload_engine:
            applied.append("the policy (" + (", ".join(self.engine_keys) or "bundle changed on disk") + ")")
        parts.append("reloading " + ", ".join(applied) if applied else "nothing to reload")
        if self.restart_keys:
            parts.append("needs a restart (kept as before): " + ", ".join(self.restart_keys))
        return "; ".join(parts)


def plan_reload(old: DaemonConfig, new: DaemonConfig, old_bundle_id: str, new_bundle_id: str) -> ReloadPlan:
    restart: list[str] = []
    for section in RESTART_SECTIONS:
        restart += changed_keys(getattr(old, section), getattr(new, section), section)
    return ReloadPlan(
        daemon_keys=changed_keys(old.daemon, new.daemon, "daemon"),
        engine_keys=changed_keys(old.engine, new.engine, "engine"),
        bundle_changed=old_bundle_id != new_bundle_id,
        restart_keys=restart,
    )
