"""The link between the daemon and the arm's process: one Unix SOCK_SEQPACKET socket pair.

:meth:`Link.send` takes one of the messages of :mod:`runtime.arm.messages` and :meth:`Link.receive`
yields them; :mod:`runtime.arm.codec` turns them into bytes and back (a msgpack map each). Each
message is one datagram (the kernel keeps the boundaries, so there is no framing to get wrong).
Both ends send without blocking: a full socket buffer means the other side has stopped reading, and
the sender drops what it cannot send (counted) rather than wait, which matters most for the arm's
process, whose tick must never wait on the daemon. A peer that dies closes its end: the survivor's
next receive returns end-of-file at once, without a heartbeat, however the peer died (SIGKILL,
a native crash, an exit).

Why this and not shared memory or ZeroMQ (``tools/bench/ipc.py`` measures the three side by side): the link
carries commands, e-stops and chunks that must arrive whole, once and in order, which a socket gives
and a shared-memory slot would have to be taught; the end-of-file on a peer's death is the fault
detector; and unlike a ZeroMQ socket it adds no I/O thread to the arm's process.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import time
from collections.abc import Callable, Collection, Iterator

from runtime.arm.codec import decode, encode
from runtime.arm.messages import Message
from runtime.errors import LinkProtocolError

#: the largest message either side sends (a chunk of 100 x 14 float32 is 5.6 KB; a status map ~4 KB)
MAX_MESSAGE = 1 << 20
SOCKET_BUFFER = 4 << 20


class LinkClosed(Exception):
    """The other end of the link is gone."""


class Link:
    """One end of the socket pair. ``send`` never blocks; ``receive`` drains what has arrived."""

    def __init__(self, sock: socket.socket, takes: Collection[type[Message]]) -> None:
        """``takes``: the kinds this end receives (the other end's, :data:`~runtime.arm.messages.DAEMON_MESSAGES`
        in the arm process); any other arriving is refused."""
        self.sock = sock
        self.takes = frozenset(takes)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            # the kernel's cap (net.core.wmem_max) applies; the default still works
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        sock.setblocking(False)
        self.closed = False
        #: messages not sent because the other side had stopped reading
        self.dropped = 0
        #: datagrams received that were no message of this version (each raised LinkProtocolError)
        self.refused = 0

    @classmethod
    def pair(cls, takes: Collection[type[Message]]) -> tuple[Link, socket.socket]:
        """This end, receiving ``takes``, and the other end's socket (to hand to the child process)."""
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        return cls(a, takes), b

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: Message) -> bool:
        """Send one message; False when it was dropped (buffer full) or the link is closed. A value
        msgpack cannot carry raises (TypeError, ValueError, OverflowError) and nothing is sent."""
        sent = self._send(encode(message))
        if sent is None:
            self.dropped += 1
        return bool(sent)

    def send_last(self, message: Message, timeout_s: float = 2.0) -> bool:
        """Send a process's last word (its goodbye, why it could not start), waiting up to ``timeout_s``
        for room rather than dropping it as a tick's message is: nothing comes after it to wait for, and
        the peer reads what it says (whether the arm was let go with its torque off). False, counted as
        one drop, when the peer read nothing in that time; False at once when the link is closed."""
        data = encode(message)
        deadline = time.monotonic() + timeout_s
        while (sent := self._send(data)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.dropped += 1
                return False
            # writable once the peer has read: a datagram socket's queue is a number of messages
            # (net.unix.max_dgram_qlen, 10 by default), not only bytes
            select.select([], [self.sock], [], min(left, 0.05))
        return sent

    def _send(self, data: bytes) -> bool | None:
        """True when sent, None when there was no room, False when the link is closed."""
        if self.closed:
            return False
        try:
            self.sock.send(data)
        except BlockingIOError:
            return None
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.ECONNRESET, errno.EBADF, errno.ENOTCONN):
                self.closed = True
                return False
            raise
        return True

    def receive(self) -> Iterator[Message]:
        """Every message that has arrived, without waiting; raises :class:`LinkClosed` at end-of-file.

        A datagram that is no message of this version raises
        :class:`~runtime.errors.LinkProtocolError` naming what is wrong with it (and counts in
        ``refused``); it is consumed, so the next receive goes on with the one after it
        (:meth:`messages` does)."""
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.ECONNRESET, errno.EBADF, errno.ENOTCONN):
                    self.closed = True
                    raise LinkClosed(str(e)) from None
                raise
            if not data:
                self.closed = True
                raise LinkClosed("the other end closed the link")
            try:
                message = decode(data, self.takes)
            except LinkProtocolError:
                self.refused += 1
                raise
            yield message

    def messages(self, refuse: Callable[[LinkProtocolError], object]) -> Iterator[Message]:
        """Every message that has arrived, as :meth:`receive`, with each datagram refused on the way
        handed to ``refuse`` instead of raised; raises :class:`LinkClosed` at end-of-file."""
        while True:
            try:
                yield from self.receive()
                return
            except LinkProtocolError as e:  # that datagram is gone: go on with the next
                refuse(e)

    def close(self) -> None:
        """Close this end, dropping first what the peer sent and this end never read: a Unix socket
        closed with unread messages resets its peer, whose next receive then fails at once and loses
        what this end said last (the arm's goodbye, with whether its torque is off)."""
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)  # from here the peer's sends fail rather than queue
            self.sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while self.sock.recv(MAX_MESSAGE):
                    pass
        with contextlib.suppress(OSError):
            self.sock.close()


class Refusals:
    """Which refused messages to log: the first of each kind and field, and only so many kinds of
    refusal (a peer that sends one bad message a tick would fill the log); ``Link.refused`` counts them
    all."""

    def __init__(self, limit: int = 32) -> None:
        self._said: set[tuple[str | None, str | None]] = set()
        self._limit = limit

    def first(self, e: LinkProtocolError) -> bool:
        """Whether ``e`` is the first refusal of its kind and field (and within the limit)."""
        key = (e.kind, e.field)
        if key in self._said or len(self._said) >= self._limit:
            return False
        self._said.add(key)
        return True
