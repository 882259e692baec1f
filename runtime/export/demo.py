"""The built-in bundles: the demo policy the default configuration serves, the ACT-size model, and
the bundles the benchmarks serve (exported from a LeRobot checkpoint a module of this package writes).

They are exported on first use (this needs the export extra) into the bundle store, and re-exported
when the installed lerobot-runtime or OpenVINO version differs from the one that made them (a
compiled blob only imports on the OpenVINO version that produced it).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime import __version__
from runtime.bundle.manifest import Manifest, read_manifest
from runtime.engine.config import EngineConfig
from runtime.errors import BundleError, ConfigError, MissingDependencyError
from runtime.versions import package_version

log = logging.getLogger(__name__)

FACTORIES = {
    "demo": "runtime.policies.act:make_demo_policy",
    "act": "runtime.policies.act:make_act_policy",
}
# The policy name also marks the model's revision: a bundle of an older built-in model is re-exported.
NAMES = {"demo": "demo_act_residual", "act": "act_resnet18"}


def resolve_bundle_path(config: EngineConfig) -> Path:
    """``engine.bundle``, else the built-in demo bundle (exported on first use)."""
    if config.bundle:
        return Path(config.bundle).expanduser()
    return ensure_bundle("demo")


def with_bundle(config: EngineConfig) -> EngineConfig:
    """``config`` with its bundle resolved, as the daemon and the commands load it: a configuration that
    names no bundle serves the built-in demo bundle."""
    return dataclasses.replace(config, bundle=str(resolve_bundle_path(config)))


def bundle_store() -> Path:
    """Where built-in bundles live: $LEROBOT_RUNTIME_BUNDLES, systemd's $STATE_DIRECTORY, or ~/.local/share."""
    if env := os.environ.get("LEROBOT_RUNTIME_BUNDLES"):
        return Path(env)
    if state := os.environ.get("STATE_DIRECTORY"):
        return Path(state.split(":")[0]) / "bundles"
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "lerobot-runtime" / "bundles"


def _is_current(path: Path, name: str) -> bool:
    try:
        m = read_manifest(path)
    except BundleError:
        return False
    tools = m.tools
    return (
        m.policy_name == name
        and tools.get("lerobot_runtime") == __version__
        and tools.get("openvino") == package_version("openvino")
    )


def ensure_bundle(kind: str = "demo", root: Path | None = None) -> Path:
    """Path to the built-in bundle ``kind`` ("demo" or "act"), exporting it first if needed."""
    if kind not in FACTORIES:
        raise ConfigError(f"built-in bundle: expected one of {', '.join(FACTORIES)}, got {kind!r}")
    path = (root or bundle_store()) / kind
    if _is_current(path, NAMES[kind]):
        return path
    from runtime.export.export import export_bundle

    log.info("building the built-in %s bundle in %s (once)", kind, path)
    try:
        export_bundle(FACTORIES[kind], path, device="CPU", policy_name=NAMES[kind])
    except MissingDependencyError as e:
        raise MissingDependencyError(
            f"no bundle is configured, and the built-in {kind} bundle is exported on first use, which "
            f"needs the export tools: {e}; or point engine.bundle (or the BUNDLE argument) at an "
            "exported bundle"
        ) from e
    return path


def ensure_checkpoint_bundle(
    name: str,
    policy: str,
    checkpoint: Sequence[str],
    *,
    export_args: Sequence[str] = (),
    fits: Callable[[Manifest], bool] = lambda m: True,
    root: Path | None = None,
) -> Path:
    """Path to the store's bundle ``name``, built first when it is missing, not current or not ``fits``.

    It is built in two processes of its own (their output on stderr: stdout is a ``--json`` report's):
    ``python -m <checkpoint[0]> CKPT_DIR <checkpoint[1:]>`` writes a LeRobot checkpoint, then
    ``export --lerobot CKPT_DIR --name <policy> <export_args>``; into a new directory that replaces
    the old bundle only once complete.
    """
    path = (root or bundle_store()) / name
    if _is_current(path, policy) and fits(read_manifest(path)):
        return path
    log.info("building the %s bundle in %s (once)", name, path)
    new = path.with_name(path.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"lrt-{name}-ckpt-") as tmp:
        ckpt = Path(tmp) / "checkpoint"
        python = [sys.executable, "-m"]
        subprocess.run([*python, checkpoint[0], str(ckpt), *checkpoint[1:]], check=True, stdout=sys.stderr)
        export = ["export", "--lerobot", str(ckpt), "--out", str(new), "--name", policy, *export_args]
        subprocess.run([*python, "runtime", *export], check=True, stdout=sys.stderr)
    shutil.rmtree(path, ignore_errors=True)
    new.replace(path)
    return path
