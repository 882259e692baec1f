"""The benchmarks' store bundles: built from a LeRobot checkpoint once, reused while current and fit,
rebuilt otherwise, and an old bundle left whole when a build fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runtime.bundle.manifest import read_manifest
from runtime.export.demo import ensure_checkpoint_bundle

CHECKPOINT = ("runtime.policies.lerobot_checkpoints", "act", "tiny")


@pytest.mark.timeout(600)
def test_a_store_bundle_is_built_once_reused_rebuilt_when_unfit_and_kept_when_a_build_fails(tmp_path: Path) -> None:
    joints = "a,b,c,d,e,f"
    path = ensure_checkpoint_bundle(
        "bench_x", "bench_x_policy", CHECKPOINT, export_args=("--action-names", joints), root=tmp_path
    )
    assert path == tmp_path / "bench_x"
    m = read_manifest(path)
    assert m.policy_name == "bench_x_policy" and list(m.action_names) == joints.split(",")
    program = next(path.glob("*.pte"))
    built = program.stat().st_mtime_ns

    # current and fit: opened, not built again
    again = ensure_checkpoint_bundle("bench_x", "bench_x_policy", CHECKPOINT, root=tmp_path, fits=lambda m: True)
    assert again == path and program.stat().st_mtime_ns == built

    # a build that fails leaves the bundle there as it was, and no half-built directory
    with pytest.raises(subprocess.CalledProcessError):
        ensure_checkpoint_bundle(
            "bench_x", "bench_x_policy", ("runtime.no_such_module",), root=tmp_path, fits=lambda m: False
        )
    assert program.stat().st_mtime_ns == built and read_manifest(path).policy_name == "bench_x_policy"

    # not fit (here: the bundle names its joints otherwise than wanted): built again, in place
    wanted = "j1,j2,j3,j4,j5,j6"
    rebuilt = ensure_checkpoint_bundle(
        "bench_x",
        "bench_x_policy",
        CHECKPOINT,
        export_args=("--action-names", wanted),
        root=tmp_path,
        fits=lambda m: list(m.action_names) == wanted.split(","),
    )
    assert rebuilt == path and list(read_manifest(path).action_names) == wanted.split(",")
    assert next(path.glob("*.pte")).stat().st_mtime_ns != built
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench_x"]
