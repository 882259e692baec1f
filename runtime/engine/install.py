"""Installing a bundle on the robot: verify, prove, then switch atomically.

``lerobot-runtime bundle install SRC`` copies a bundle into the bundle directory under a name of
its own (``POLICY-<manifest sha256[:12]>``), checks every file against the manifest, runs the parity
gate on the copy, and only then points the ``current`` symlink at it with one ``rename``: a daemon
reading ``current`` sees the old bundle or the new one, never a half-copied one. The daemon keeps
its loaded program in memory, so it serves on undisturbed until it is told to reload (SIGHUP,
``systemctl reload``), and then it switches only after the new program passed the same gate.
The previous version stays in the directory (roll back by installing it again).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from runtime.bundle.bundle import Bundle
from runtime.bundle.manifest import MANIFEST_FILE
from runtime.engine.config import EngineConfig
from runtime.errors import BundleError

log = logging.getLogger(__name__)

DEFAULT_BUNDLES_DIR = "/var/lib/lerobot-runtime/bundles"  # systemd's StateDirectory=lerobot-runtime


@dataclass(frozen=True)
class Installed:
    path: Path  # the versioned directory
    link: Path  # the symlink now pointing at it
    previous: Path | None  # what the link pointed at before
    parity: str  # the parity gate's verdict on the installed copy


def _files(bundle: Bundle) -> list[str]:
    m = bundle.manifest
    names = [MANIFEST_FILE, m.test_case.file, *(e.file for e in m.programs.values())]
    if m.portable_program is not None:
        names.append(m.portable_program.file)
    if m.language is not None:
        names.append(m.language.tokenizer.file)
    return sorted(set(names))


def install_bundle(
    src: str | Path, bundles_dir: str | Path, *, link: str = "current", engine: EngineConfig | None = None
) -> Installed:
    """Copy, verify and parity-check ``src`` in ``bundles_dir``, then point ``bundles_dir/link`` at it."""
    from runtime.engine.loader import LoadReport, load_engine

    source = Bundle.open(src, verify_all=True)
    root = Path(bundles_dir)
    root.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256((source.path / MANIFEST_FILE).read_bytes()).hexdigest()[:12]
    name = f"{source.manifest.policy_name}-{digest}"
    final = root / name
    if final.exists():
        Bundle.open(final, verify_all=True)  # already installed: only prove it is intact
        stage = final
    else:
        # staged beside the destination (same file system), so the rename below is atomic
        stage = Path(tempfile.mkdtemp(prefix=".incoming-", dir=root))
        for file in _files(source):
            shutil.copy2(source.path / file, stage / file)
        os.chmod(stage, 0o755)
    try:
        Bundle.open(stage, verify_all=True)
        report = LoadReport()
        before = os.sched_getaffinity(0)
        try:
            config = replace(engine or EngineConfig(), bundle=str(stage), warmup_runs=0, allow_parity_failure=False)
            load_engine(config, report=report).close()  # raises ParityError when the copy does not reproduce
        finally:
            os.sched_setaffinity(0, before)  # loading pins the calling thread
        if stage != final:
            os.rename(stage, final)
    except BaseException:
        if stage != final:
            shutil.rmtree(stage, ignore_errors=True)
        raise
    link_path = root / link
    previous = link_path.resolve() if link_path.is_symlink() else None
    if link_path.exists() and not link_path.is_symlink():
        raise BundleError(f"{link_path} exists and is not a symlink; move it away to let install manage it")
    tmp = root / f".{link}.new"
    tmp.unlink(missing_ok=True)
    os.symlink(name, tmp)  # relative: the directory can be moved or bind-mounted as a whole
    os.replace(tmp, link_path)
    parity = report.parity.describe() if report.parity is not None else "no parity result"
    log.info("installed %s as %s; %s now points at it (was %s)", source.path, final, link_path, previous)
    return Installed(final, link_path, previous, parity)
