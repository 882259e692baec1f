"""Reading a recorded dataset back: whole episodes as arrays, or observations for calibration.

Recorded observations are stored in the form the policy takes them: ``observation.state`` as
float32 joint vectors, camera frames as uint8 H x W x 3 RGB (decoded from the video, so as the
codec left them). :meth:`DatasetReader.observations` yields them frame by frame, keyed by the
policy's input names, which is what a quantisation calibration set needs::

    from runtime.recording.reader import DatasetReader

    reader = DatasetReader("/data/pick")
    calib = list(reader.observations(max_frames=300))  # [{"observation.state": ..., "observation.images.front": ...}]
    episode = reader.episode(0)                       # episode.columns["action"], episode.images[...]

Only pyarrow and PyAV are needed (no LeRobot, no torch).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from runtime.errors import RecordingError
from runtime.recording import layout, tables
from runtime.recording.features import IMAGE_PREFIX, STATE
from runtime.recording.video import decode_frames


@dataclass(frozen=True)
class Episode:
    """One episode: ``columns`` holds every data column (vectors as (frames, dims) arrays, strings
    as lists); ``images`` maps each camera key to its (frames, H, W, 3) uint8 frames."""

    index: int
    tasks: list[str]
    length: int
    columns: dict[str, Any]
    images: dict[str, npt.NDArray[np.uint8]]


class DatasetReader:
    """A LeRobot v3.0 dataset folder, read with pyarrow and PyAV."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        info_path = self.root / layout.INFO_PATH
        if not info_path.exists():
            raise RecordingError(f"{self.root}: not a dataset ({layout.INFO_PATH} is missing)")
        with open(info_path, encoding="utf-8") as f:
            self.info: dict[str, Any] = json.load(f)
        self.fps = int(self.info["fps"])
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self.tasks = tables.read_tasks(self.root / layout.TASKS_PATH) if self.info["total_episodes"] else []
        pq = tables.pa().parquet
        rows: list[dict[str, Any]] = []
        for path in sorted((self.root / layout.EPISODES_DIR).glob("*/*.parquet")):
            names = [n for n in pq.read_schema(path).names if not n.startswith("stats/")]
            rows += pq.read_table(path, columns=names).to_pylist()
        self._episodes = sorted(rows, key=lambda r: int(r["episode_index"]))

    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    def episode_length(self, index: int) -> int:
        """Frames in episode ``index``, from the episodes metadata (no table or video is read)."""
        if not 0 <= index < len(self._episodes):
            raise RecordingError(f"episode {index}: the dataset has episodes 0..{len(self._episodes) - 1}")
        return int(self._episodes[index]["length"])

    @property
    def camera_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft["dtype"] == "video"]

    def episode(self, index: int, *, images: bool = True, keep: Sequence[int] | None = None) -> Episode:
        """Episode ``index``: its table columns, and its camera frames unless ``images`` is False.

        ``keep``: only these frame numbers of each camera (ascending), in that order; the columns
        stay whole."""
        if not 0 <= index < len(self._episodes):
            raise RecordingError(f"episode {index}: the dataset has episodes 0..{len(self._episodes) - 1}")
        meta = self._episodes[index]
        path = layout.data_file(self.root, meta["data/chunk_index"], meta["data/file_index"])
        table = tables.pa().parquet.read_table(path)
        start = int(meta["dataset_from_index"])
        index_col = table.column("index").to_numpy()
        first = int(np.searchsorted(index_col, start))
        part = table.slice(first, int(meta["length"]))
        columns: dict[str, Any] = {}
        for name in part.column_names:
            col = part.column(name)
            ft = self.features.get(name, {})
            if ft.get("dtype") == "string":
                columns[name] = col.to_pylist()
            elif list(ft.get("shape", [1])) != [1]:
                flat = col.combine_chunks().flatten().to_numpy(zero_copy_only=False)
                columns[name] = flat.reshape(len(col), -1).astype(ft["dtype"], copy=False)
            else:
                columns[name] = col.to_numpy()
        frames: dict[str, npt.NDArray[np.uint8]] = {}
        if images:
            for key in self.camera_keys:
                video = layout.video_file(
                    self.root, key, meta[f"videos/{key}/chunk_index"], meta[f"videos/{key}/file_index"]
                )
                frames[key] = decode_frames(
                    video, float(meta[f"videos/{key}/from_timestamp"]), int(meta["length"]), self.fps, keep
                )
        return Episode(int(meta["episode_index"]), list(meta["tasks"]), int(meta["length"]), columns, frames)

    def observations(self, *, max_frames: int | None = None, stride: int = 1) -> Iterator[dict[str, Any]]:
        """Observations as the policy takes them, every ``stride``-th frame, at most ``max_frames``:
        ``observation.state`` float32 (joints,), ``observation.images.<camera>`` uint8 (H, W, 3)."""
        if stride < 1:
            raise ValueError(f"stride: expected >= 1, got {stride}")
        given = 0
        for index in range(self.num_episodes):
            if max_frames is not None and given >= max_frames:
                return  # before decoding an episode none of whose frames would be given
            episode = self.episode(index)
            for i in range(0, episode.length, stride):
                if max_frames is not None and given >= max_frames:
                    return
                obs: dict[str, Any] = {STATE: episode.columns[STATE][i]}
                for key, frames in episode.images.items():
                    if key.startswith(IMAGE_PREFIX):
                        obs[key] = frames[i]
                yield obs
                given += 1
