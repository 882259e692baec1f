"""The link's ends, one behaviour at a time: every drop counted, a closed or dead peer is end-of-file
with its reason, a send after the end returns False and never raises, and the values the status map
needs (integer keys, no present pose, the arm's error) cross it unchanged."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from runtime.arm.wire import Link, LinkClosed, pack_snapshot, unpack_snapshot
from runtime.control.snapshot import Snapshot


def _filled(link: Link) -> int:
    payload = {"t": "tick", "pad": b"x" * 60_000}
    sent = 0
    while link.send(payload):
        sent += 1
    return sent


def test_each_dropped_message_is_counted() -> None:
    link, other = Link.pair()
    try:
        assert link.closed is False and link.dropped == 0
        _filled(link)
        assert not link.send({"t": "again"})
        assert not link.send({"t": "and again"})
        assert link.dropped == 3
        assert link.closed is False  # full is not closed
    finally:
        link.close()
        other.close()


def test_the_pair_is_a_datagram_socket_pair_of_the_unix_family() -> None:
    link, other = Link.pair()
    try:
        assert link.sock.family == socket.AF_UNIX and link.sock.type == socket.SOCK_SEQPACKET
        assert other.family == socket.AF_UNIX
        assert link.sock.getblocking() is False
    finally:
        link.close()
        other.close()


def test_a_send_to_a_closed_peer_returns_false_and_marks_the_link_closed() -> None:
    link, other = Link.pair()
    other.close()
    try:
        assert link.send({"t": "gate"}) is False
        assert link.closed is True
        assert link.dropped == 0  # not a drop: the end
        assert link.send({"t": "gate"}) is False
    finally:
        link.close()


def test_the_peer_closing_is_end_of_file_with_its_reason() -> None:
    link, other = Link.pair()
    other.close()
    try:
        with pytest.raises(LinkClosed) as err:
            list(link.receive())
        assert str(err.value) == "the other end closed the link"
        assert link.closed is True
    finally:
        link.close()


def test_a_receive_on_a_link_closed_here_is_end_of_file_naming_the_error() -> None:
    link, other = Link.pair()
    try:
        link.sock.close()  # the descriptor is gone (EBADF)
        with pytest.raises(LinkClosed) as err:
            list(link.receive())
        assert str(err.value) == "[Errno 9] Bad file descriptor"
        assert err.value.__cause__ is None and err.value.__suppress_context__
        assert link.closed is True
        assert link.send({"t": "x"}) is False
    finally:
        other.close()


def test_a_send_on_a_link_whose_socket_is_gone_returns_false() -> None:
    link, other = Link.pair()
    try:
        link.sock.close()
        assert link.send({"t": "x"}) is False
        assert link.closed is True
    finally:
        other.close()


def test_close_marks_the_link_closed_and_may_be_called_twice() -> None:
    link, other = Link.pair()
    try:
        link.close()
        assert link.closed is True
        assert link.send({"t": "x"}) is False
        link.close()
    finally:
        other.close()


def test_a_message_with_integer_keys_and_bytes_arrives_equal() -> None:
    a, other = Link.pair()
    b = Link(other)
    try:
        message = {"t": "status", "cpu_seen": {0: 10, 3: 2}, "name": "arm", "blob": b"\x00\x01"}
        assert a.send(message)
        assert list(b.receive()) == [message]
        assert list(b.receive()) == []  # drained: nothing more, and no wait
    finally:
        a.close()
        b.close()


def test_a_snapshot_without_a_present_pose_and_with_an_arm_error_crosses_unchanged() -> None:
    a, other = Link.pair()
    b = Link(other)
    try:
        snap = Snapshot(present=None, arm_error="servo 3 timed out", cpu_seen={2: 7})
        assert a.send(pack_snapshot(snap))
        (got,) = list(b.receive())
        back = unpack_snapshot(got)
        assert back.present is None
        assert back.arm_error == "servo 3 timed out"
        assert back.cpu_seen == {2: 7}
        with_pose = unpack_snapshot(pack_snapshot(Snapshot(present=np.array([1, 2], dtype=np.int64))))
        assert with_pose.present is not None and with_pose.present.dtype == np.float64
    finally:
        a.close()
        b.close()


def test_an_end_closed_with_messages_it_never_read_still_delivers_what_it_said_last() -> None:
    # a Unix socket closed with unread messages resets its peer: the goodbye before it would be lost
    link, other = Link.pair()
    peer = Link(other)
    try:
        for k in range(3):
            assert peer.send({"t": "gate", "k": k})  # never read by ``link``
        assert link.send({"t": "bye", "ok": False})
        link.close()
        got = []
        with pytest.raises(LinkClosed, match="the other end closed the link"):
            got.extend(peer.receive())
        assert got == [{"t": "bye", "ok": False}]
        assert not peer.send({"t": "gate"}) and peer.closed
    finally:
        peer.close()


def test_a_last_word_waits_for_room_and_is_counted_once_when_none_comes() -> None:
    import threading

    link, other = Link.pair()
    peer = Link(other)
    try:
        sent = _filled(link)
        read: list[dict[str, object]] = []

        def read_later() -> None:
            threading.Event().wait(0.2)
            read.extend(peer.receive())

        reader = threading.Thread(target=read_later)
        reader.start()
        assert link.send_last({"t": "bye", "ok": True, "why": b"\x00bytes"}, timeout_s=0.9)  # read after 0.2 s
        reader.join()
        read.extend(peer.receive())
        assert len(read) == sent + 1 and read[-1] == {"t": "bye", "ok": True, "why": b"\x00bytes"}
        assert link.dropped == 1  # the one that found the buffer full in _filled

        _filled(link)
        dropped = link.dropped
        assert not link.send_last({"t": "bye", "ok": True}, timeout_s=0.1)  # nobody reads
        assert link.dropped == dropped + 1
        peer.close()
        assert not link.send_last({"t": "bye", "ok": True}, timeout_s=10.0)  # closed: no wait
    finally:
        link.close()
        peer.close()
