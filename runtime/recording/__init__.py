"""Recording episodes as LeRobot v3.0 datasets, off the control thread.

- :class:`EpisodeRecorder` (``recorder``): the API the control loop calls; never blocks.
- :class:`DatasetWriter` (``writer``): the disk side, on the recorder's writer thread.
- :class:`RecordingFeatures` (``features``): joints, cameras, rate: the dataset's columns.
- :func:`check_dataset` (``check``): every file against the format (``lerobot-runtime dataset check``).
- :class:`DatasetReader` (``reader``): episodes back as arrays, observations in the policy's form.

pyarrow and PyAV are needed (``pip install 'lerobot-runtime[record]'``); they are imported when a
dataset is opened, not when this package is.
"""

from runtime.recording.config import RecordingConfig
from runtime.recording.features import RecordingFeatures
from runtime.recording.recorder import EpisodeRecorder, RecorderStatus
from runtime.recording.video import VideoSettings
from runtime.recording.writer import DatasetWriter, EpisodeSink, EpisodeSummary

__all__ = [
    "DatasetWriter",
    "EpisodeRecorder",
    "EpisodeSink",
    "EpisodeSummary",
    "RecorderStatus",
    "RecordingConfig",
    "RecordingFeatures",
    "VideoSettings",
]
