"""Recording fixtures: SO-101 features with one small camera, and frames that can be told apart
after lossy video coding (each frame is a flat grey level plus a gradient)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

pytest.importorskip("pyarrow", reason="recording needs the record extra (pyarrow)")
pytest.importorskip("av", reason="recording needs the record extra (PyAV)")

from drivers.calibration import SO101_JOINTS
from runtime.recording import RecordingFeatures

HEIGHT, WIDTH = 48, 64


@pytest.fixture
def features() -> RecordingFeatures:
    return RecordingFeatures(
        fps=30, joint_names=SO101_JOINTS, cameras={"front": (HEIGHT, WIDTH)}, robot_type="so101_follower"
    )


def frame_image(k: int) -> npt.NDArray[np.uint8]:
    """Frame k: grey level 20 + 7k (mod 200) plus a horizontal gradient, so frames differ by mean."""
    base = 20 + (7 * k) % 200
    ramp = np.linspace(0, 30, WIDTH, dtype=np.float32)[None, :, None]
    return np.clip(base + ramp + np.zeros((HEIGHT, WIDTH, 3), np.float32), 0, 255).astype(np.uint8)


@dataclass
class Tick:
    t_s: float
    state: npt.NDArray[np.float32]
    action: npt.NDArray[np.float32]
    requested: npt.NDArray[np.float32]
    image: npt.NDArray[np.uint8]
    source: str
    intervention: bool


def ticks(n: int, *, seed: int, start_frame: int = 0, source: str = "policy") -> list[Tick]:
    """n control ticks at about 30 Hz with a little jitter, as a real loop would report them."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        requested = rng.uniform(-100, 100, 6).astype(np.float32)
        out.append(
            Tick(
                t_s=1000.0 + i / 30 + float(rng.uniform(0, 0.002)),
                state=rng.uniform(-100, 100, 6).astype(np.float32),
                action=np.clip(requested, -50, 50),
                requested=requested,
                image=frame_image(start_frame + i),
                source=source if i < n // 2 else "teleop",
                intervention=i >= n // 2,
            )
        )
    return out


def add(recorder: object, tick: Tick, camera: str = "front") -> bool:
    return recorder.add_frame(  # type: ignore[attr-defined,no-any-return]
        tick.t_s, tick.state, tick.action, tick.requested, {camera: tick.image}, tick.source, tick.intervention
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "dataset"


def shm_segments() -> set[str]:
    from runtime.recording.shm_ring import NAME_PREFIX

    return {p.name for p in Path("/dev/shm").glob(NAME_PREFIX + "*")}


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fails the test if it leaves a frame ring's shared memory or a child process behind."""
    before = shm_segments()
    yield
    assert shm_segments() - before == set(), "shared memory segments left behind"
    assert multiprocessing.active_children() == [], "child processes left behind"


@pytest.fixture
def dataset(root: Path, features: RecordingFeatures) -> Path:
    """Two whole episodes (tasks "a" and "b", 6 and 5 frames, one camera) that the checker passes."""
    from runtime.recording import DatasetWriter, EpisodeRecorder
    from runtime.recording.check import check_dataset

    with EpisodeRecorder(DatasetWriter(root, features), features) as recorder:
        for task, n, start in (("a", 6, 0), ("b", 5, 6)):
            recorder.start_episode(task)
            for t in ticks(n, seed=n, start_frame=start):
                add(recorder, t)
            recorder.end_episode()
    assert check_dataset(root).problems == []
    return root
