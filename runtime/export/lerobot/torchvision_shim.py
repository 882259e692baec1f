"""Importing LeRobot here: the torchvision and transformers shims, the version check and the install hint.

LeRobot pins an older torch than ExecuTorch needs, so it is installed beside us with ``--no-deps``
(see docs/lerobot.md); this module is the one place that imports it, so every failure names what to
install.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path
from typing import Any, Final

from runtime.errors import MissingDependencyError
from runtime.versions import package_version

log = logging.getLogger(__name__)

# LeRobot releases whose checkpoint format (config.json + processor pipelines) this reader knows.
SUPPORTED_LEROBOT: Final = ("0.4",)

INSTALL_HINT: Final = (
    "pip install --no-deps lerobot==0.4.4 && pip install 'lerobot-runtime[lerobot]' "
    "(LeRobot pins an older torch than ExecuTorch needs, so it goes in without its dependencies)"
)


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


def _shim_transformers() -> None:
    """Let transformers 4.57 (SmolVLA's VLM) import beside the hub and tokenizers LeRobot's stack needs.

    transformers 4.x refuses, at import, huggingface-hub >= 1.0 and tokenizers > 0.23.0, while the
    datasets and diffusers releases that import beside torch 2.13 need huggingface-hub >= 1.31; so
    transformers goes in with ``--no-deps`` (as LeRobot does) and its import-time version check is
    skipped here. What the exporter uses of it (SmolVLM's modules, configs and tokenizer read from a
    local directory) works with both; the SmolVLA parity tests say when it stops doing so. LeRobot's
    own ``lerobot.policies`` imports transformers whenever it is installed, so this runs before any
    LeRobot import.
    """
    name = "transformers.dependency_versions_check"
    if name in sys.modules or "transformers" in sys.modules or importlib.util.find_spec("transformers") is None:
        return
    stub = types.ModuleType(name)
    stub.__doc__ = "transformers' import-time version check, skipped by runtime.export.lerobot.torchvision_shim"

    def dep_version_check(pkg: str, hint: str | None = None) -> None:
        return None

    stub.dep_version_check = dep_version_check  # type: ignore[attr-defined]
    sys.modules[name] = stub


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
        _shim_transformers()
        # LeRobot logs through absl/torchao warnings at import; they are not ours
        os.environ.setdefault("TORCHAO_NO_WARNINGS", "1")
        return importlib.import_module("lerobot")
    except ImportError as e:
        raise MissingDependencyError(f"exporting a LeRobot checkpoint needs LeRobot ({e}): {INSTALL_HINT}") from e
