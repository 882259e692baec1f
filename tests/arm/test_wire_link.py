"""The link's ends, one behaviour at a time: every drop counted, a closed or dead peer is end-of-file
with its reason, a send after the end returns False and never raises, a datagram that is no message
of this version is refused (counted, named) and the next one still read, and the last word survives
a close."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import msgpack
import pytest

from runtime.arm.messages import ARM_MESSAGES, DAEMON_MESSAGES, Bye, Gate, Message, StatusMap, Tick, Waiting
from runtime.arm.wire import Link, LinkClosed, Refusals
from runtime.control.snapshot import Snapshot
from runtime.errors import LinkProtocolError

PAD = StatusMap({"pad": b"x" * 60_000})


def _filled(link: Link) -> int:
    sent = 0
    while link.send(PAD):
        sent += 1
    return sent


@pytest.fixture
def ends() -> Iterator[tuple[Link, Link]]:
    """(the daemon's end, the arm process's end)."""
    daemon, other = Link.pair(ARM_MESSAGES)
    arm = Link(other, DAEMON_MESSAGES)
    yield daemon, arm
    daemon.close()
    arm.close()


def test_each_dropped_message_is_counted(ends: tuple[Link, Link]) -> None:
    link, _ = ends
    assert link.closed is False and link.dropped == 0 and link.refused == 0
    _filled(link)
    assert not link.send(Gate())
    assert not link.send(Gate())
    assert link.dropped == 3
    assert link.closed is False  # full is not closed


def test_the_pair_is_a_datagram_socket_pair_of_the_unix_family() -> None:
    link, other = Link.pair(ARM_MESSAGES)
    try:
        assert link.sock.family == socket.AF_UNIX and link.sock.type == socket.SOCK_SEQPACKET
        assert other.family == socket.AF_UNIX
        assert link.sock.getblocking() is False
        assert link.takes == frozenset(ARM_MESSAGES)
    finally:
        link.close()
        other.close()


def test_a_send_to_a_closed_peer_returns_false_and_marks_the_link_closed() -> None:
    link, other = Link.pair(ARM_MESSAGES)
    other.close()
    try:
        assert link.send(Gate()) is False
        assert link.closed is True
        assert link.dropped == 0  # not a drop: the end
        assert link.send(Gate()) is False
    finally:
        link.close()


def test_the_peer_closing_is_end_of_file_with_its_reason() -> None:
    link, other = Link.pair(ARM_MESSAGES)
    other.close()
    try:
        with pytest.raises(LinkClosed) as err:
            list(link.receive())
        assert str(err.value) == "the other end closed the link"
        assert link.closed is True
    finally:
        link.close()


def test_a_receive_on_a_link_closed_here_is_end_of_file_naming_the_error() -> None:
    link, other = Link.pair(ARM_MESSAGES)
    try:
        link.sock.close()  # the descriptor is gone (EBADF)
        with pytest.raises(LinkClosed) as err:
            list(link.receive())
        assert str(err.value) == "[Errno 9] Bad file descriptor"
        assert err.value.__cause__ is None and err.value.__suppress_context__
        assert link.closed is True
        assert link.send(Gate()) is False
    finally:
        other.close()


def test_a_send_on_a_link_whose_socket_is_gone_returns_false() -> None:
    link, other = Link.pair(ARM_MESSAGES)
    try:
        link.sock.close()
        assert link.send(Gate()) is False
        assert link.closed is True
    finally:
        other.close()


def test_close_marks_the_link_closed_and_may_be_called_twice() -> None:
    link, other = Link.pair(ARM_MESSAGES)
    try:
        link.close()
        assert link.closed is True
        assert link.send(Gate()) is False
        link.close()
    finally:
        other.close()


def test_a_message_msgpack_cannot_carry_raises_and_sends_nothing(ends: tuple[Link, Link]) -> None:
    daemon, arm = ends
    with pytest.raises(TypeError):
        arm.send(StatusMap({"odd": object()}))
    assert arm.dropped == 0 and list(daemon.receive()) == []


def test_a_map_with_integer_keys_and_bytes_arrives_equal(ends: tuple[Link, Link]) -> None:
    daemon, arm = ends
    status = {"cpu_seen": {0: 10, 3: 2}, "name": "arm", "blob": b"\x00\x01"}
    assert arm.send(StatusMap(status))
    assert list(daemon.receive()) == [StatusMap(status)]
    assert list(daemon.receive()) == []  # drained: nothing more, and no wait


def test_a_datagram_that_is_no_message_is_refused_counted_and_the_next_one_read(ends: tuple[Link, Link]) -> None:
    daemon, arm = ends
    arm.sock.send(msgpack.packb({"t": "bye", "ok": "yes"}))
    arm.send(Waiting("after the bad one"))
    received = daemon.receive()
    with pytest.raises(LinkProtocolError) as e:
        next(received)
    assert (e.value.kind, e.value.field, e.value.received) == ("bye", "ok", "'yes' (str)")
    assert daemon.refused == 1
    assert list(daemon.receive()) == [Waiting("after the bad one")]  # the bad datagram is gone, not the next


def test_a_kind_only_this_end_sends_is_refused_here(ends: tuple[Link, Link]) -> None:
    daemon, arm = ends
    daemon.send(Tick(Snapshot()))  # the arm process's kind, sent by the daemon
    with pytest.raises(LinkProtocolError) as e:
        list(arm.receive())
    assert (e.value.kind, e.value.field) == ("tick", "t") and arm.refused == 1


def test_messages_hands_each_refusal_on_and_goes_on_to_the_end(ends: tuple[Link, Link]) -> None:
    daemon, arm = ends
    arm.send(Waiting("one"))
    arm.sock.send(b"\xc1")  # never used by msgpack
    arm.sock.send(msgpack.packb({"t": "dance"}))
    arm.send(Waiting("two"))
    refusals: list[LinkProtocolError] = []
    got: list[Message] = list(daemon.messages(refusals.append))
    assert got == [Waiting("one"), Waiting("two")]
    assert [e.kind for e in refusals] == [None, "dance"] and daemon.refused == 2
    arm.close()
    with pytest.raises(LinkClosed):
        list(daemon.messages(refusals.append))


def test_the_first_refusal_of_each_kind_and_field_is_the_one_to_say() -> None:
    refusals = Refusals(limit=2)
    bad_ok = LinkProtocolError("x", kind="bye", field="ok")
    assert refusals.first(bad_ok) is True
    assert refusals.first(LinkProtocolError("y", kind="bye", field="ok")) is False  # the same again
    assert refusals.first(LinkProtocolError("z", kind="tick", field="snapshot.tick")) is True
    assert refusals.first(LinkProtocolError("w", kind="gate", field="blocked")) is False  # past the limit
    assert Refusals().first(bad_ok) is True  # each side keeps its own


def test_an_end_closed_with_messages_it_never_read_still_delivers_what_it_said_last() -> None:
    # a Unix socket closed with unread messages resets its peer: the goodbye before it would be lost
    link, other = Link.pair(DAEMON_MESSAGES)
    peer = Link(other, ARM_MESSAGES)
    try:
        for _ in range(3):
            assert peer.send(Gate())  # never read by ``link``
        assert link.send(Bye(False))
        link.close()
        got = []
        with pytest.raises(LinkClosed, match="the other end closed the link"):
            got.extend(peer.receive())
        assert got == [Bye(False)]
        assert not peer.send(Gate()) and peer.closed
    finally:
        peer.close()


def test_a_last_word_waits_for_room_and_is_counted_once_when_none_comes() -> None:
    link, other = Link.pair(DAEMON_MESSAGES)
    peer = Link(other, ARM_MESSAGES)
    try:
        sent = _filled(link)
        read: list[Message] = []

        def read_later() -> None:
            threading.Event().wait(0.2)
            read.extend(peer.receive())

        reader = threading.Thread(target=read_later)
        reader.start()
        assert link.send_last(Bye(True), timeout_s=0.9)  # read after 0.2 s
        reader.join()
        read.extend(peer.receive())
        assert len(read) == sent + 1 and read[-1] == Bye(True)
        assert link.dropped == 1  # the one that found the buffer full in _filled

        _filled(link)
        dropped = link.dropped
        assert not link.send_last(Bye(True), timeout_s=0.1)  # nobody reads
        assert link.dropped == dropped + 1
        peer.close()
        assert not link.send_last(Bye(True), timeout_s=10.0)  # closed: no wait
    finally:
        link.close()
        peer.close()
