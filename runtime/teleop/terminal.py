"""The station's terminal: keys read one at a time without Enter or echo, and one status line
redrawn in place. Raw mode goes back on exit whatever happened (the shell stays usable)."""

from __future__ import annotations

import os
import select
import sys
import termios
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


@contextmanager
def raw_keys(stream: TextIO | None = None) -> Iterator[KeyReader]:
    """cbreak mode on ``stream`` (stdin) for the block; a non-terminal gives a reader that never has keys."""
    stream = stream if stream is not None else sys.stdin
    fd = stream.fileno() if stream.isatty() else -1
    saved = termios.tcgetattr(fd) if fd >= 0 else None
    try:
        if fd >= 0:
            tty.setcbreak(fd)
        yield KeyReader(fd)
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class KeyReader:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __call__(self) -> str | None:
        """One pending key, or None at once when there is none."""
        if self.fd < 0:
            return None
        ready, _, _ = select.select([self.fd], [], [], 0)
        if not ready:
            return None
        data = os.read(self.fd, 1)
        return data.decode(errors="replace") if data else None


def status_printer(out: TextIO | None = None) -> StatusPrinter:
    return StatusPrinter(out if out is not None else sys.stdout)


class StatusPrinter:
    """Redraws one line on a terminal (carriage return, clear to end); prints a line per change otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._last = ""

    def __call__(self, line: str) -> None:
        if self.tty:
            self.out.write("\r\x1b[2K" + line)
            self.out.flush()
        elif line.split("rtt")[0] != self._last.split("rtt")[0]:  # not a line per tick in a journal
            self.out.write(line + "\n")
            self.out.flush()
        self._last = line

    def done(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()
