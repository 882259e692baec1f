"""What a recording holds: each refusal at its bound, word for word, and the info.json features."""

from __future__ import annotations

import pytest

from runtime.errors import ConfigError
from runtime.recording.features import RecordingFeatures


def test_fps_bounds() -> None:
    assert RecordingFeatures(fps=1, joint_names=("a",)).fps == 1
    assert RecordingFeatures(fps=1000, joint_names=("a",)).fps == 1000
    for bad in (0, 1001, True, 30.0):
        with pytest.raises(ConfigError) as e:
            RecordingFeatures(fps=bad, joint_names=("a",))  # type: ignore[arg-type]
        assert str(e.value) == f"recording.fps: expected an integer rate in [1, 1000] Hz, got {bad!r}"


@pytest.mark.parametrize("names", [(), ("a", ""), ("a", 3)])
def test_joint_names_refused(names: tuple[object, ...]) -> None:
    with pytest.raises(ConfigError) as e:
        RecordingFeatures(fps=30, joint_names=names)  # type: ignore[arg-type]
    assert str(e.value) == f"recording.joint_names: expected non-empty names, got {names!r}"


def test_repeated_joint_names() -> None:
    with pytest.raises(ConfigError) as e:
        RecordingFeatures(fps=30, joint_names=("a", "b", "a"))
    assert str(e.value) == "recording.joint_names: names repeat in ['a', 'b', 'a']"


def test_joint_names_become_a_tuple() -> None:
    f = RecordingFeatures(fps=30, joint_names=["a", "b"])  # type: ignore[arg-type]
    assert f.joint_names == ("a", "b")
    assert f.num_joints == 2


@pytest.mark.parametrize("name", ["", "-front", "a b", "x/y", 3])
def test_camera_names_refused(name: object) -> None:
    with pytest.raises(ConfigError) as e:
        RecordingFeatures(fps=30, joint_names=("a",), cameras={name: (16, 16)})  # type: ignore[dict-item]
    assert str(e.value) == (
        f"recording.cameras: camera name {name!r} must be letters, digits, '_', '-' or '.' "
        "(it becomes a folder name and part of a column name)"
    )


def test_camera_names_allowed() -> None:
    f = RecordingFeatures(fps=30, joint_names=("a",), cameras={"_w.r-2": (16, 16), "Top9": ["20", 18]})  # type: ignore[dict-item]
    assert f.cameras == {"_w.r-2": (16, 16), "Top9": (20, 18)}


@pytest.mark.parametrize("size", [(16,), (16, 16, 3), None, ("a", 16)])
def test_camera_size_not_two_integers(size: object) -> None:
    with pytest.raises(ConfigError) as e:
        RecordingFeatures(fps=30, joint_names=("a",), cameras={"front": size})  # type: ignore[dict-item]
    assert str(e.value) == f"recording.cameras.front: expected (height_px, width_px), got {size!r}"


@pytest.mark.parametrize(("h", "w"), [(14, 16), (16, 14), (17, 16), (16, 17)])
def test_camera_size_refused(h: int, w: int) -> None:
    with pytest.raises(ConfigError) as e:
        RecordingFeatures(fps=30, joint_names=("a",), cameras={"front": (h, w)})
    assert str(e.value) == f"recording.cameras.front: expected even height and width >= 16 px, got {h}x{w}"


def test_defaults_and_keys() -> None:
    f = RecordingFeatures(fps=30, joint_names=("a",))
    assert f.cameras == {}
    assert f.robot_type is None
    assert f.image_keys == ()
    g = RecordingFeatures(fps=30, joint_names=("a",), cameras={"front": (16, 32), "wrist": (18, 20)})
    assert g.image_key("front") == "observation.images.front"
    assert g.image_keys == ("observation.images.front", "observation.images.wrist")


def test_dataset_features_written_out() -> None:
    f = RecordingFeatures(fps=30, joint_names=("j1", "j2"), cameras={"front": (48, 64)})
    vector = {"dtype": "float32", "shape": [2], "names": ["j1", "j2"]}
    scalar = {"shape": [1], "names": None}
    assert f.dataset_features() == {
        "observation.state": vector,
        "action": vector,
        "request.action": vector,
        "observation.images.front": {
            "dtype": "video",
            "shape": [48, 64, 3],
            "names": ["height", "width", "channels"],
        },
        "control.source": {"dtype": "string", **scalar},
        "control.intervention": {"dtype": "bool", **scalar},
        "control.time_s": {"dtype": "float64", **scalar},
        "timestamp": {"dtype": "float32", **scalar},
        "frame_index": {"dtype": "int64", **scalar},
        "episode_index": {"dtype": "int64", **scalar},
        "index": {"dtype": "int64", **scalar},
        "task_index": {"dtype": "int64", **scalar},
    }
    assert list(f.dataset_features())[:4] == [
        "observation.state",
        "action",
        "request.action",
        "observation.images.front",
    ]
    # each feature its own dict: changing one does not change another or the next call's
    feats = f.dataset_features()
    feats["action"]["names"] = ["x"]
    feats["timestamp"]["dtype"] = "x"
    assert feats["observation.state"]["shape"] == [2]
    assert f.dataset_features()["timestamp"]["dtype"] == "float32"
