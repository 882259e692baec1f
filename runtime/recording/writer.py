"""Writes episodes into a LeRobot v3.0 dataset folder, one frame at a time.

:class:`DatasetWriter` is the disk side of recording and runs on one thread (the recorder's writer
thread): ``begin_episode`` -> ``write_frame``... -> ``finish_episode`` (or ``abort_episode``).
Frames are kept in memory as small arrays while camera frames are encoded straight to a per-episode
video; at the end of an episode its rows, its video spans, its statistics and the dataset totals are
written, ``meta/info.json`` last, each file replaced atomically. So every finished episode is on disk
whole, and a crash mid-episode loses that episode only.

An existing dataset folder is continued (episode and frame indices go on from where it stopped) when
its features match; otherwise the writer refuses it and says which feature differs. What a crash while
finishing an episode left that ``info.json`` does not count is dropped first (``uncounted.py``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from runtime.errors import RecordingError
from runtime.recording import layout, tables
from runtime.recording.encoder_process import EncodedVideo
from runtime.recording.features import (
    ACTION,
    CONTROL_TIME,
    INTERVENTION,
    REQUESTED_ACTION,
    SOURCE,
    STATE,
    RecordingFeatures,
)
from runtime.recording.frames import FrameSlot
from runtime.recording.stats import ImageStats, Stats, column_stats, combine, from_json, to_json
from runtime.recording.uncounted import drop_uncounted
from runtime.recording.video import EpisodeVideo, VideoSettings, append_video, video_info

log = logging.getLogger(__name__)

STAGING_DIR = ".recording"  # the writer's lock, and per-episode videos while they are being encoded


@dataclass(frozen=True)
class EpisodeDrops:
    """Ticks of an episode left out because a camera's encoder was behind (its ring was full).

    ``per_camera``: camera column -> ticks it had no free slot for; ``ticks``: ticks left out (a tick
    is recorded for every camera or for none, so the rows and every video keep the same frames);
    ``rate``: ``ticks / (ticks + frames recorded)``; ``over_limit``: ``rate`` exceeded
    ``[recording] max_drop_rate``."""

    per_camera: dict[str, int]
    ticks: int
    rate: float
    over_limit: bool


@dataclass(frozen=True)
class EpisodeSummary:
    """What ``finish_episode`` wrote."""

    episode_index: int
    frames: int
    task: str
    duration_s: float


class EpisodeSink(Protocol):
    """Where the recorder's writer thread sends episodes (the dataset writer, or a test's wrapper)."""

    def begin_episode(self, task: str) -> int: ...
    def write_frame(self, frame: FrameSlot) -> None: ...
    def finish_episode(self) -> EpisodeSummary | None: ...
    def abort_episode(self) -> None: ...
    def close(self) -> None: ...


@dataclass
class _FileCursor:
    """The file episodes are being appended to: its (chunk, file) and what it holds so far."""

    chunk: int = 0
    file: int = 0
    frames: int = 0
    started: bool = False


class _Episode:
    def __init__(self, index: int, task: str) -> None:
        self.index = index
        self.task = task
        self.t_s: list[float] = []
        self.state: list[npt.NDArray[np.float32]] = []
        self.action: list[npt.NDArray[np.float32]] = []
        self.requested: list[npt.NDArray[np.float32]] = []
        self.source: list[str] = []
        self.intervention: list[bool] = []
        self.videos: dict[str, EpisodeVideo] = {}
        self.image_stats: dict[str, ImageStats] = {}
        # encoded elsewhere (an encoder process per camera): the finished files, handed in at the end
        self.encoded: dict[str, EncodedVideo] = {}
        self.drops: EpisodeDrops | None = None

    @property
    def frames(self) -> int:
        return len(self.t_s)


class DatasetWriter:
    """A LeRobot v3.0 dataset at ``root``, created or continued; one thread only.

    ``encode_video=False``: camera frames are encoded elsewhere (by the recorder's encoder
    processes); ``write_frame`` takes the joint columns only and ``attach_encoded`` hands each
    camera's finished file in before ``finish_episode``.
    """

    def __init__(
        self,
        root: str | Path,
        features: RecordingFeatures,
        *,
        video: VideoSettings | None = None,
        data_file_size_mb: float = layout.DATA_FILE_SIZE_MB,
        video_file_size_mb: float = layout.VIDEO_FILE_SIZE_MB,
        encode_video: bool = True,
    ) -> None:
        self.root = Path(root)
        self.features = features
        self.video = video or VideoSettings()
        self.encode_video = encode_video
        if features.cameras and encode_video:
            self.video.check_available()
        self._data_limit_mb = data_file_size_mb
        self._video_limit_mb = video_file_size_mb
        self._ft = features.dataset_features()
        self._episode: _Episode | None = None
        self._tasks: list[str] = []
        self._episode_rows: list[dict[str, Any]] = []  # rows of the current episodes file
        self._episodes_file = _FileCursor()
        self._stats: dict[str, Stats] = {}
        self._data = _FileCursor()
        self._data_table: Any = None
        self._videos = {key: _FileCursor() for key in features.image_keys}
        existing = (self.root / layout.INFO_PATH).exists()
        if not existing and self.root.exists() and any(p.name != STAGING_DIR for p in self.root.iterdir()):
            raise RecordingError(
                f"{self.root}: not empty and not a dataset (no {layout.INFO_PATH}); "
                "record into a new folder or an existing dataset"
            )
        self._lock = self._take_lock()
        try:
            # leftovers of an episode a crash interrupted
            for leftover in (self.root / STAGING_DIR).glob("episode-*"):
                shutil.rmtree(leftover, ignore_errors=True)
            if existing:
                self._resume()
            else:
                self._info = self._new_info()
                tables.write_json(self._info, self.root / layout.INFO_PATH)
        except BaseException:
            self._release_lock()
            raise

    def _take_lock(self) -> int:
        """One writer per dataset: a second one (another recorder, another process) is refused."""
        staging = self.root / STAGING_DIR
        staging.mkdir(parents=True, exist_ok=True)
        fd = os.open(staging / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(fd)
            raise RecordingError(f"{self.root}: another recorder is writing this dataset") from e
        return fd

    def _release_lock(self) -> None:
        if self._lock >= 0:
            os.close(self._lock)  # closing the descriptor releases the lock
            self._lock = -1
        shutil.rmtree(self.root / STAGING_DIR, ignore_errors=True)

    # -- dataset-level state ---------------------------------------------------------------------

    def _new_info(self) -> dict[str, Any]:
        return {
            "codebase_version": layout.CODEBASE_VERSION,
            "robot_type": self.features.robot_type,
            "total_episodes": 0,
            "total_frames": 0,
            "total_tasks": 0,
            "chunks_size": layout.CHUNKS_SIZE,
            "data_files_size_in_mb": layout.DATA_FILE_SIZE_MB,
            "video_files_size_in_mb": layout.VIDEO_FILE_SIZE_MB,
            "fps": self.features.fps,
            "splits": {},
            "data_path": layout.DATA_PATH,
            "video_path": layout.VIDEO_PATH if self.features.cameras else None,
            "features": self._ft,
        }

    def _resume(self) -> None:
        pa = tables.pa()
        with open(self.root / layout.INFO_PATH, encoding="utf-8") as f:
            info = json.load(f)
        if info.get("codebase_version") != layout.CODEBASE_VERSION:
            raise RecordingError(
                f"{self.root}: dataset format {info.get('codebase_version')!r}, this recorder writes "
                f"{layout.CODEBASE_VERSION!r}; record into a new folder"
            )
        if info.get("fps") != self.features.fps:
            raise RecordingError(f"{self.root}: dataset fps is {info.get('fps')}, recording at {self.features.fps}")
        theirs = info.get("features", {})
        for key in sorted(set(theirs) | set(self._ft)):
            mine = self._ft.get(key)
            other = {k: v for k, v in theirs.get(key, {}).items() if k != "info"} if key in theirs else None
            if mine != other:
                raise RecordingError(
                    f"{self.root}: feature {key!r} differs: the dataset has {other}, this recording {mine}; "
                    "record into a new folder"
                )
        dropped = drop_uncounted(self.root, info, self.features.image_keys)
        if dropped:
            log.warning(
                "%s: dropped what a run that stopped while finishing episode %d left without counting it: %s",
                self.root,
                info["total_episodes"],
                "; ".join(dropped),
            )
        self._info = info
        self._ft = info["features"]
        if (self.root / layout.TASKS_PATH).exists():
            self._tasks = tables.read_tasks(self.root / layout.TASKS_PATH)
        if (self.root / layout.STATS_PATH).exists():
            with open(self.root / layout.STATS_PATH, encoding="utf-8") as f:
                self._stats = from_json(json.load(f))
        files = sorted((self.root / layout.EPISODES_DIR).glob("*/*.parquet"))
        if not files or info["total_episodes"] == 0:
            return
        last_rows = pa.parquet.read_table(files[-1]).to_pylist()
        last = last_rows[-1]
        self._episode_rows = last_rows
        self._episodes_file = _FileCursor(last["meta/episodes/chunk_index"], last["meta/episodes/file_index"], 0, True)
        self._data = _FileCursor(last["data/chunk_index"], last["data/file_index"], 0, True)
        self._data_table = pa.parquet.read_table(layout.data_file(self.root, self._data.chunk, self._data.file)).cast(
            tables.data_schema(self._ft)
        )
        for key, cursor in self._videos.items():
            cursor.chunk = last[f"videos/{key}/chunk_index"]
            cursor.file = last[f"videos/{key}/file_index"]
            cursor.frames = round(last[f"videos/{key}/to_timestamp"] * self.features.fps)
            cursor.started = True
        log.info(
            "continuing dataset %s: %d episodes, %d frames", self.root, info["total_episodes"], info["total_frames"]
        )

    @property
    def total_episodes(self) -> int:
        return int(self._info["total_episodes"])

    @property
    def total_frames(self) -> int:
        return int(self._info["total_frames"])

    # -- one episode -----------------------------------------------------------------------------

    def begin_episode(self, task: str) -> int:
        if self._episode is not None:
            raise RecordingError(f"episode {self._episode.index} is still open; finish or abort it first")
        if not isinstance(task, str) or not task.strip():
            raise RecordingError(f"task: expected the task's text, got {task!r}")
        ep = _Episode(self.total_episodes, task)
        staging = self.root / STAGING_DIR / f"episode-{ep.index:06d}"
        try:
            for cam, (height, width) in self.features.cameras.items() if self.encode_video else ():
                key = self.features.image_key(cam)
                ep.videos[key] = EpisodeVideo(staging / f"{key}.mp4", self.features.fps, height, width, self.video)
                ep.image_stats[key] = ImageStats()
        except Exception:
            for v in ep.videos.values():
                v.abort()
            raise
        self._episode = ep
        return ep.index

    def write_frame(self, frame: FrameSlot) -> None:
        ep = self._episode
        if ep is None:
            raise RecordingError("write_frame: no episode is open")
        for cam, image in frame.images.items() if self.encode_video else ():
            key = self.features.image_key(cam)
            ep.videos[key].add(image)
            ep.image_stats[key].add(image)
        ep.t_s.append(frame.t_s)
        ep.state.append(frame.state.copy())
        ep.action.append(frame.action.copy())
        ep.requested.append(frame.requested.copy())
        ep.source.append(frame.source)
        ep.intervention.append(frame.intervention)

    def attach_encoded(self, videos: dict[str, EncodedVideo], drops: EpisodeDrops | None = None) -> None:
        """The open episode's camera files (camera column -> file), encoded elsewhere, and the ticks
        left out while they were; each file must hold one frame per row."""
        ep = self._episode
        if ep is None:
            raise RecordingError("attach_encoded: no episode is open")
        missing = sorted(set(self.features.image_keys) - set(videos))
        if missing:
            raise RecordingError(f"attach_encoded: expected a file for every camera, got none for {missing}")
        for key, video in videos.items():
            if video.frames != ep.frames:
                raise RecordingError(f"{key}: expected {ep.frames} encoded frames (one per row), got {video.frames}")
        ep.encoded = dict(videos)
        ep.drops = drops

    def abort_episode(self) -> None:
        ep, self._episode = self._episode, None
        if ep is None:
            return
        for v in ep.videos.values():
            v.abort()
        for encoded in ep.encoded.values():
            encoded.path.unlink(missing_ok=True)
        shutil.rmtree(self.root / STAGING_DIR / f"episode-{ep.index:06d}", ignore_errors=True)

    def finish_episode(self) -> EpisodeSummary | None:
        """Write the open episode; an episode without frames is dropped (LeRobot has no empty ones)."""
        ep = self._episode
        if ep is None:
            raise RecordingError("finish_episode: no episode is open")
        if ep.frames == 0:
            log.info("episode %d had no frames: nothing written", ep.index)
            self.abort_episode()
            return None
        try:
            summary = self._write_episode(ep)
        finally:
            self.abort_episode()  # closes anything left and clears the staging folder
        return summary

    def _write_episode(self, ep: _Episode) -> EpisodeSummary:
        fps = self.features.fps
        n = ep.frames
        first_index = self.total_frames
        if ep.task not in self._tasks:
            self._tasks.append(ep.task)
        task_index = self._tasks.index(ep.task)
        columns: dict[str, Any] = {
            STATE: np.stack(ep.state),
            ACTION: np.stack(ep.action),
            REQUESTED_ACTION: np.stack(ep.requested),
            SOURCE: ep.source,
            INTERVENTION: np.array(ep.intervention, dtype=bool),
            CONTROL_TIME: np.array(ep.t_s, dtype=np.float64) - ep.t_s[0],
            # LeRobot finds video frames at from_timestamp + timestamp: keep it on the 1/fps grid
            "timestamp": (np.arange(n) / fps).astype(np.float32),
            "frame_index": np.arange(n, dtype=np.int64),
            "episode_index": np.full(n, ep.index, dtype=np.int64),
            "index": np.arange(first_index, first_index + n, dtype=np.int64),
            "task_index": np.full(n, task_index, dtype=np.int64),
        }
        if not self.encode_video and self.features.cameras and not ep.encoded:
            raise RecordingError(f"episode {ep.index}: no camera files were attached (attach_encoded)")
        stats: dict[str, Stats] = {key: ep.image_stats[key].result() for key in ep.image_stats}
        stats.update({key: video.stats for key, video in ep.encoded.items()})
        for key, ft in self._ft.items():
            if ft["dtype"] not in ("video", "string"):
                stats[key] = column_stats(np.asarray(columns[key]))
        meta: dict[str, Any] = {"episode_index": ep.index, "tasks": [ep.task], "length": n}
        meta.update(self._append_data(columns))
        meta["dataset_from_index"] = first_index
        meta["dataset_to_index"] = first_index + n
        for key, video in ep.videos.items():
            meta.update(self._append_video(key, video.finish(), n))
        for key, encoded in ep.encoded.items():
            meta.update(self._append_video(key, encoded.path, n))
        meta.update(tables.drop_columns(self.features.image_keys, ep.drops))
        self._append_episode_row(tables.episode_row(meta, stats))
        tables.write_table(tables.tasks_table(self._tasks), self.root / layout.TASKS_PATH)
        self._stats = combine([self._stats, stats]) if self._stats else stats
        tables.write_json(to_json(self._stats), self.root / layout.STATS_PATH)
        info = self._info
        info["total_episodes"] += 1
        info["total_frames"] += n
        info["total_tasks"] = len(self._tasks)
        info["splits"] = {"train": f"0:{info['total_episodes']}"}
        # info.json last: a reader that sees the new totals finds every file they speak of
        tables.write_json(info, self.root / layout.INFO_PATH)
        log.info("episode %d written: %d frames (%.1f s), task %r", ep.index, n, n / fps, ep.task)
        return EpisodeSummary(ep.index, n, ep.task, n / fps)

    def _append_data(self, columns: dict[str, Any]) -> dict[str, Any]:
        pa = tables.pa()
        table = tables.data_table(self._ft, columns)
        cursor = self._data
        if cursor.started and self._data_table is not None:
            path = layout.data_file(self.root, cursor.chunk, cursor.file)
            size_mb = path.stat().st_size / 2**20
            per_row = size_mb / max(1, self._data_table.num_rows)
            if size_mb + per_row * table.num_rows >= self._data_limit_mb:
                cursor.chunk, cursor.file = layout.next_file(cursor.chunk, cursor.file)
                self._data_table = None
        cursor.started = True
        self._data_table = table if self._data_table is None else pa.concat_tables([self._data_table, table])
        tables.write_table(self._data_table, layout.data_file(self.root, cursor.chunk, cursor.file))
        return {"data/chunk_index": cursor.chunk, "data/file_index": cursor.file}

    def _append_video(self, key: str, episode_file: Path, frames: int) -> dict[str, Any]:
        fps = self.features.fps
        cursor = self._videos[key]
        dst = layout.video_file(self.root, key, cursor.chunk, cursor.file)
        if cursor.started:
            size_mb = (dst.stat().st_size + episode_file.stat().st_size) / 2**20
            if size_mb >= self._video_limit_mb:
                cursor.chunk, cursor.file = layout.next_file(cursor.chunk, cursor.file)
                cursor.frames = 0
                cursor.started = False
                dst = layout.video_file(self.root, key, cursor.chunk, cursor.file)
        if cursor.started:
            append_video(dst, episode_file, cursor.frames, fps)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(episode_file), str(dst))
            cursor.started = True
        if "info" not in self._ft[key]:
            self._ft[key]["info"] = video_info(dst)
        start = cursor.frames
        cursor.frames += frames
        return {
            f"videos/{key}/chunk_index": cursor.chunk,
            f"videos/{key}/file_index": cursor.file,
            f"videos/{key}/from_timestamp": start / fps,
            f"videos/{key}/to_timestamp": cursor.frames / fps,
        }

    def _append_episode_row(self, row: dict[str, Any]) -> None:
        cursor = self._episodes_file
        if cursor.started:
            path = layout.episodes_file(self.root, cursor.chunk, cursor.file)
            if path.stat().st_size / 2**20 >= self._data_limit_mb:
                cursor.chunk, cursor.file = layout.next_file(cursor.chunk, cursor.file)
                self._episode_rows = []
        cursor.started = True
        row["meta/episodes/chunk_index"] = cursor.chunk
        row["meta/episodes/file_index"] = cursor.file
        self._episode_rows.append(row)
        tables.write_table(
            tables.episodes_table(self._ft, self._episode_rows),
            layout.episodes_file(self.root, cursor.chunk, cursor.file),
        )

    def close(self) -> None:
        """Drop an episode still open (it was never finished), release the dataset and remove the
        staging folder."""
        self.abort_episode()
        self._release_lock()
