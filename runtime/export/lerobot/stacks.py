"""Which LeRobot stack traces a checkpoint: the release that wrote it, and a Python where that release runs.

A policy's numbers are those of the code that computes it: LeRobot's model code and, for SmolVLA, the
transformers release under it (4.57 and 5.x compute SmolVLM's vision patch position ids differently:
a 0.6 SmolVLA run through 0.4's stack differs by ~5e-3 of the action std). So the reference chunk a
bundle's gate compares with is computed by the LeRobot minor release that wrote the checkpoint, with
its own pins, and only the lowering runs in this Python (ExecuTorch's OpenVINO backend). The releases'
pins collide (0.4 runs on Python 3.11 beside this project's torch; 0.6 needs Python >= 3.12,
torch < 2.12 and transformers 5.x), so a release other than the one installed here runs in a Python
of its own (``make lerobot-stacks``; ``--lerobot-python``), as a child that writes a trace
(runtime.export.trace) this process lowers.

Which release wrote a checkpoint is read from its ``config.json``: every release since 0.6 writes
fields no older one knows (``RELEASE_MARKERS``); LeRobot records no version of its own there.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from runtime.errors import ExportError
from runtime.versions import package_version

log = logging.getLogger(__name__)

# The LeRobot minor releases this exporter traces with (checked: 0.4.4 and 0.6.1), oldest first.
RELEASES: Final = ("0.4", "0.6")
# Fields a release writes into every policy's config.json that no older release's config knows.
RELEASE_MARKERS: Final[Mapping[str, tuple[str, ...]]] = {"0.6": ("pretrained_revision",)}
# Fields that only describe the hub or training: a release that does not know one loses nothing by
# ignoring it. Any other field the tracing release does not know is refused by name (it may change
# the computation).
DESCRIPTIVE_FIELDS: Final[Mapping[str, str]] = {
    "pretrained_revision": "the hub revision the weights came from",
    "gradient_checkpointing": "a training memory setting",
}
# What installs each release's stack beside this project (the Makefile's lerobot-stacks target).
STACK_HINT: Final[Mapping[str, str]] = {
    "0.4": "pip install --no-deps lerobot==0.4.4 && pip install 'lerobot-runtime[lerobot,smolvla]' (this Python)",
    "0.6": (
        "make lerobot-stacks (a Python 3.12 venv .venv-lerobot-0.6 with lerobot[smolvla]==0.6.1), or point "
        "--lerobot-python (or LEROBOT_RUNTIME_LEROBOT_PYTHON) at a Python that has lerobot 0.6.x"
    ),
}
ENV_PYTHON: Final = "LEROBOT_RUNTIME_LEROBOT_PYTHON"
PACKAGE_ROOT: Final = Path(__file__).resolve().parents[3]  # the directory holding runtime/ and drivers/


def release_of(version: str) -> str:
    """``0.6.1`` -> ``0.6``."""
    return ".".join(version.split(".")[:2])


def written_by(config: Mapping[str, Any]) -> str:
    """The LeRobot minor release that wrote a checkpoint's ``config.json``: the newest whose markers it has."""
    found = RELEASES[0]
    for release in RELEASES:
        if any(f in config for f in RELEASE_MARKERS.get(release, ())):
            found = release
    return found


@dataclass(frozen=True)
class Stack:
    """A Python with a LeRobot release and what computes under it."""

    python: str
    lerobot: str
    transformers: str
    torch: str
    current: bool  # this very process

    @property
    def release(self) -> str:
        return release_of(self.lerobot)

    def describe(self) -> str:
        where = "this Python" if self.current else self.python
        return f"LeRobot {self.lerobot}, transformers {self.transformers}, torch {self.torch} ({where})"


_PROBE = (
    "import json\n"
    "from importlib import metadata\n"
    "def v(d):\n"
    "    try:\n"
    "        return metadata.version(d)\n"
    "    except metadata.PackageNotFoundError:\n"
    "        return 'not installed'\n"
    "print(json.dumps({d: v(d) for d in ('lerobot', 'transformers', 'torch')}))\n"
)


def probe(python: str) -> Stack | None:
    """The stack of ``python`` (None when it cannot be run or has no LeRobot)."""
    if Path(python).resolve() == Path(sys.executable).resolve():
        versions = {d: package_version(d) for d in ("lerobot", "transformers", "torch")}
        current = True
    else:
        try:
            done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False)
            versions = json.loads(done.stdout) if done.returncode == 0 else {}
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            versions = {}
        current = False
    if versions.get("lerobot", "not installed") == "not installed":
        return None
    return Stack(python, versions["lerobot"], versions["transformers"], versions["torch"], current)


def candidates(explicit: str | None = None) -> list[str]:
    """Pythons to ask, in order: ``--lerobot-python``, ``$LEROBOT_RUNTIME_LEROBOT_PYTHON`` (a path list),
    this Python, then each release's venv beside the checkout (``.venv-lerobot-<release>``)."""
    found: list[str] = []
    if explicit:
        found.append(explicit)
    found += [p for p in os.environ.get(ENV_PYTHON, "").split(os.pathsep) if p]
    found.append(sys.executable)
    found += [str(PACKAGE_ROOT / f".venv-lerobot-{r}" / "bin" / "python") for r in RELEASES]
    return list(dict.fromkeys(found))


def find_stack(release: str, *, explicit: str | None = None, why: str = "") -> Stack:
    """A Python whose LeRobot is ``release``; ExportError naming what was found and what to install."""
    if explicit:  # the user's choice is the only one
        stack = probe(explicit)
        if stack is None:
            raise ExportError(f"--lerobot-python: {explicit} cannot be run or has no LeRobot installed")
        if stack.release != release:
            raise ExportError(
                f"{why}--lerobot-python: {explicit} has LeRobot {stack.lerobot}; the checkpoint was written by "
                f"LeRobot {release}.x and is traced by that release's own classes"
            )
        return stack
    seen: list[Stack] = []
    for python in candidates():
        if not Path(python).exists():
            continue
        stack = probe(python)
        if stack is None:
            continue
        if stack.release == release:
            return stack
        seen.append(stack)
    found = "; ".join(s.describe() for s in seen) or "no Python with LeRobot"
    raise ExportError(
        f"{why}the checkpoint was written by LeRobot {release}.x and is traced by that release's own classes "
        f"(the reference the bundle's gate holds it to is that release's computation); found: {found}. "
        f"Install it: {STACK_HINT.get(release, f'a Python with lerobot {release}.x, named by --lerobot-python')}"
    )


def unknown_fields(config: Mapping[str, Any], known: Sequence[str], where: Path) -> list[str]:
    """The config fields the tracing release does not know that only describe the hub or training (to be
    ignored); ExportError naming any other unknown field."""
    unknown = [k for k in config if k != "type" and k not in known]
    computing = [k for k in unknown if k not in DESCRIPTIVE_FIELDS]
    if computing:
        raise ExportError(
            f"{where}: field(s) {', '.join(computing)} are not known to the installed LeRobot "
            f"{package_version('lerobot')} and may change what the policy computes; trace the checkpoint with the "
            "LeRobot release that wrote it (--lerobot-python)"
        )
    return unknown
