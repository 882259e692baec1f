"""Logging set-up: one line per event, journald-friendly.

Under systemd (``JOURNAL_STREAM`` set) the timestamp is left to journald and each line carries a
``<N>`` syslog priority prefix, which journald turns into the entry's priority. journald makes one
entry per line, so a multi-line message (OpenVINO's exception text, a traceback) is folded into one
line there, its lines joined with `` | ``.
"""

from __future__ import annotations

import logging
import os
import sys

_SYSLOG_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def one_line(text: str) -> str:
    """``text``'s non-blank lines, stripped and joined with `` | ``."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        priority = _SYSLOG_PRIORITY.get(record.levelno, 6)
        return f"<{priority}>{one_line(super().format(record))}"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of each record (it may be replaced later)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


# Libraries that warn at import about what this project does not use (torchao's CUDA kernels and
# triton, torch's pytree registrations): noise to a user, so below DEBUG only their errors show.
QUIET_LOGGERS = ("torchao", "torch.utils._pytree")
QUIET_WARNINGS = r"(torch|torchao|executorch|nncf|copyreg)(\.|$)"


def setup_logging(level: str | int = "INFO") -> None:
    """Configure the root logger for a CLI or daemon process.

    Only a handler installed by an earlier call is replaced; handlers others attached (a test
    harness, an embedding application) are left in place.
    """
    handler = _StderrHandler()
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _StderrHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    quiet = root.getEffectiveLevel() > logging.DEBUG
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR if quiet else logging.NOTSET)
    if quiet:
        import warnings

        for category in (DeprecationWarning, FutureWarning, UserWarning):
            warnings.filterwarnings("ignore", category=category, module=QUIET_WARNINGS)
