"""The station's terminal on a pseudo-terminal the test holds: cbreak mode on stdin (file descriptor 0,
as in a shell) for the block and back after it, even after an error; one key per read, never waiting;
a stream that is not a terminal; the status line redrawn in place, or a line per change in a journal."""

from __future__ import annotations

import io
import os
import select
import sys
import termios
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.teleop.terminal import KeyReader, StatusPrinter, raw_keys, status_printer


class Pty:
    def __init__(self) -> None:
        self.master, self.slave = os.openpty()

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def lflag(self, fd: int) -> int:
        return int(termios.tcgetattr(fd)[3])


class Stdin:
    """What ``sys.stdin`` is to ``raw_keys``: a terminal on file descriptor 0."""

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return 0


@pytest.fixture
def pty() -> Iterator[Pty]:
    p = Pty()
    yield p
    os.close(p.master)
    os.close(p.slave)


@pytest.fixture
def stdin_pty(pty: Pty, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pty]:
    """The pty's terminal side on file descriptor 0 and a ``sys.stdin`` on it, put back after."""
    saved = os.dup(0)
    os.dup2(pty.slave, 0)
    monkeypatch.setattr(sys, "stdin", Stdin())
    try:
        yield pty
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def wait_key(keys: KeyReader) -> str | None:
    """The first key the reader returns (a pty delivers a write at once; a few tries cover scheduling)."""
    for _ in range(200):
        if (ch := keys()) is not None:
            return ch
        select.select([keys.fd], [], [], 0.01)
    return None


def test_stdin_is_in_cbreak_mode_inside_the_block_and_restored_after(stdin_pty: Pty) -> None:
    before = termios.tcgetattr(0)
    assert before[3] & termios.ICANON and before[3] & termios.ECHO
    with raw_keys() as keys:  # the default stream: stdin
        assert keys.fd == 0
        inside = stdin_pty.lflag(0)
        assert not inside & termios.ICANON and not inside & termios.ECHO
        assert keys() is None  # nothing typed: at once
        stdin_pty.type(b"t")  # no Enter: cbreak delivers the key
        assert wait_key(keys) == "t"
    assert termios.tcgetattr(0) == before


def test_the_terminal_is_restored_after_an_error_inside_the_block(stdin_pty: Pty) -> None:
    before = termios.tcgetattr(0)
    with pytest.raises(RuntimeError, match="boom"), raw_keys(Stdin()):  # type: ignore[arg-type]
        raise RuntimeError("boom")
    assert termios.tcgetattr(0) == before


def test_keys_come_one_at_a_time_and_undecodable_bytes_are_replaced(pty: Pty) -> None:
    with open(pty.slave, encoding="utf-8", closefd=False) as tty_in, raw_keys(tty_in) as keys:
        assert keys.fd == pty.slave
        pty.type(b"th\xff")
        assert wait_key(keys) == "t"
        assert wait_key(keys) == "h"
        assert wait_key(keys) == "\ufffd"
        assert keys() is None


def test_a_key_read_never_waits(pty: Pty, monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts: list[Any] = []
    real = select.select

    def spy(r: Any, w: Any, x: Any, timeout: Any = None) -> Any:
        timeouts.append(timeout)
        return real(r, w, x, timeout)

    monkeypatch.setattr(select, "select", spy)
    assert KeyReader(pty.slave)() is None
    assert timeouts == [0]


def test_end_of_input_is_no_key() -> None:
    r, w = os.pipe()
    os.close(w)
    try:
        assert KeyReader(r)() is None
    finally:
        os.close(r)


def test_a_stream_that_is_not_a_terminal_never_has_keys_and_is_left_alone() -> None:
    with raw_keys(io.StringIO()) as keys:  # a StringIO has no file descriptor: it must not be asked for one
        assert keys.fd == -1 and keys() is None
    assert KeyReader(-1)() is None


class Out(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty
        self.flushed = 0

    def isatty(self) -> bool:
        return self._tty

    def flush(self) -> None:
        self.flushed += 1
        super().flush()


def test_on_a_terminal_the_line_is_redrawn_in_place_and_ended_when_done() -> None:
    out = Out(tty=True)
    show = StatusPrinter(out)
    show("idle  rtt   1.0 ms")
    assert (out.getvalue(), out.flushed) == ("\r\x1b[2Kidle  rtt   1.0 ms", 1)
    show("idle  rtt   1.0 ms")  # the same line again is still drawn: a terminal shows the newest
    assert out.getvalue().count("\r\x1b[2K") == 2 and out.flushed == 2
    show.done()
    assert out.getvalue().endswith("ms\n") and out.flushed == 3


def test_in_a_journal_a_line_is_printed_only_when_what_precedes_rtt_changes() -> None:
    out = Out(tty=False)
    show = StatusPrinter(out)
    show("idle  rtt   1.0 ms  sent 0")
    assert (out.getvalue(), out.flushed) == ("idle  rtt   1.0 ms  sent 0\n", 1)
    show("idle  rtt   2.5 ms  sent 1")  # only the round trip and the count moved: not a line per tick
    assert out.getvalue() == "idle  rtt   1.0 ms  sent 0\n" and out.flushed == 1
    show("teleop  rtt   2.5 ms  sent 1")
    assert out.getvalue() == "idle  rtt   1.0 ms  sent 0\nteleop  rtt   2.5 ms  sent 1\n" and out.flushed == 2
    show("idle  rtt   2.5 ms  sent 2")  # compared with the last line shown, not the first
    assert out.getvalue().endswith("teleop  rtt   2.5 ms  sent 1\nidle  rtt   2.5 ms  sent 2\n")
    show.done()  # no line to end
    assert out.getvalue().endswith("sent 2\n") and out.flushed == 3


def test_the_printer_writes_to_stdout_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    out = Out(tty=False)
    monkeypatch.setattr(sys, "stdout", out)
    show = status_printer()
    assert show.out is out and show.tty is False
    other = Out(tty=True)
    show = status_printer(other)
    assert show.out is other and show.tty is True
