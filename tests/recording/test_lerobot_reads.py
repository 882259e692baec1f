"""A recorded dataset loads in LeRobot's own ``LeRobotDataset`` (where LeRobot can be imported).

LeRobot 0.4.x is not a dependency: these tests skip, saying why, when it is not installed or does
not import beside this environment's torch. PyPI's torchvision 0.28 is a CUDA build whose import
fails beside CPU torch on two fake-kernel registrations (``torchvision::nms``, ``qnms``); the
import below skips just those registrations, which dataset loading never uses.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.recording import DatasetWriter, EpisodeRecorder, RecordingConfig, RecordingFeatures
from tests.recording.conftest import Tick, add, ticks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")


def _import_torchvision_tolerantly() -> None:
    torch = pytest.importorskip("torch", reason="LeRobot needs torch")
    original = torch.library.register_fake

    def tolerant(op: Any, *args: Any, **kwargs: Any) -> Any:
        register = original(op, *args, **kwargs)

        def apply(fn: Any) -> Any:
            try:
                return register(fn)
            except RuntimeError as e:
                if "does not exist" in str(e):  # a torchvision op this CPU build of torch lacks
                    return fn
                raise

        return apply

    torch.library.register_fake = tolerant
    try:
        importlib.import_module("torchvision")
    finally:
        torch.library.register_fake = original


def lerobot_dataset_class() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: never reach for the Hub
    try:
        _import_torchvision_tolerantly()
        module = importlib.import_module("lerobot.datasets.lerobot_dataset")
    except ImportError as e:
        pytest.skip(f"LeRobot is not importable here ({e}); the format checker covers the files instead")
    except Exception as e:
        pytest.skip(f"LeRobot fails to import beside this torch ({type(e).__name__}: {e})")
    return module.LeRobotDataset


@pytest.fixture
def recorded(root: Path, features: RecordingFeatures) -> tuple[Path, list[Tick]]:
    frames = ticks(7, seed=1) + ticks(5, seed=2, start_frame=7)
    with EpisodeRecorder(DatasetWriter(root, features), features) as recorder:
        for task, part in (("pick the cube", frames[:7]), ("place the cube", frames[7:])):
            recorder.start_episode(task)
            for t in part:
                add(recorder, t)
            recorder.end_episode()
    return root, frames


def test_lerobot_loads_the_tables(recorded: tuple[Path, list[Tick]]) -> None:
    LeRobotDataset = lerobot_dataset_class()
    root, frames = recorded
    ds = LeRobotDataset("local/recorded", root=root)
    assert (ds.num_episodes, ds.num_frames, ds.fps) == (2, 12, 30)
    assert ds.meta.video_keys == ["observation.images.front"]
    assert ds.meta.get_task_index("place the cube") == 1
    assert ds.meta.stats["observation.images.front"]["mean"].shape == (3, 1, 1)
    rows = ds.hf_dataset.with_format(None)[:]
    np.testing.assert_array_equal(np.array(rows["observation.state"], np.float32), np.stack([t.state for t in frames]))
    np.testing.assert_array_equal(np.array(rows["action"], np.float32), np.stack([t.action for t in frames]))
    np.testing.assert_array_equal(np.array(rows["request.action"], np.float32), np.stack([t.requested for t in frames]))
    assert rows["control.source"] == [t.source for t in frames]
    assert rows["control.intervention"] == [t.intervention for t in frames]
    assert rows["episode_index"] == [0] * 7 + [1] * 5
    assert rows["task_index"] == [0] * 7 + [1] * 5
    np.testing.assert_allclose(rows["timestamp"], [k / 30 for k in [*range(7), *range(5)]], atol=1e-6)
    ep = ds.meta.episodes[1]
    assert ep["videos/observation.images.front/from_timestamp"] == pytest.approx(7 / 30)
    assert ds.meta.get_video_file_path(1, "observation.images.front") == Path(
        "videos/observation.images.front/chunk-000/file-000.mp4"
    )


def test_lerobot_decodes_the_frames(recorded: tuple[Path, list[Tick]]) -> None:
    LeRobotDataset = lerobot_dataset_class()
    import torchvision

    has_decoder = importlib.util.find_spec("torchcodec") is not None or hasattr(torchvision.io, "VideoReader")
    if not has_decoder:
        pytest.skip(
            "LeRobot 0.4.x decodes video with torchcodec or torchvision.io.VideoReader; neither is in this "
            "environment (torchvision 0.28 dropped VideoReader), so only its table loading is tested here"
        )
    root, frames = recorded
    ds = LeRobotDataset("local/recorded", root=root)
    for i in (0, 6, 7, 11):
        item = ds[i]
        image = item["observation.images.front"]  # float (3, H, W) in [0, 1]
        assert tuple(image.shape) == (3, 48, 64)
        want = frames[i].image.transpose(2, 0, 1) / 255.0
        assert float(np.abs(image.numpy() - want).mean()) < 3 / 255
        assert item["task"] == ("pick the cube" if i < 7 else "place the cube")


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("codec", ["libx264", "libsvtav1"])
def test_lerobot_loads_what_the_encoder_processes_wrote(root: Path, features: RecordingFeatures, codec: str) -> None:
    LeRobotDataset = lerobot_dataset_class()
    frames = ticks(9, seed=3)
    config = RecordingConfig(dataset_dir=str(root), codec=codec)
    with EpisodeRecorder.create(config, features) as recorder:
        recorder.start_episode("pick the cube")
        for t in frames:
            add(recorder, t)
        recorder.end_episode()
    ds = LeRobotDataset("local/encoded", root=root)
    assert (ds.num_episodes, ds.num_frames) == (1, 9)
    info = ds.meta.info["features"]["observation.images.front"]["info"]
    assert info["video.codec"] == {"libx264": "h264", "libsvtav1": "av1"}[codec]
    ep = ds.meta.episodes[0]
    assert ep["recording/frames_dropped"] == 0 and ep["recording/drops_over_limit"] is False
    assert ep["videos/observation.images.front/to_timestamp"] == pytest.approx(9 / 30)
