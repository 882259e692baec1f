"""A chain of simulated servos answering packets written out by hand.

Most tests run the simulator's packet handler on the test's own thread and read its replies off the
host's end of the pty: after the packet, the test writes a marker to the simulator's end, and
everything before the marker is what the chain answered (nothing at all for a packet no servo
answers), with no waiting on a clock. The serving thread's own tests start it.

Feetech checksums are worked by hand (``~(ID + Length + Instruction + Params)``, low byte); the
Dynamixel CRCs are the e-manual's or, for packets it has no example of, computed once with ROBOTIS'
``dynamixel_sdk`` (``updateCRC``) and written out.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drivers.sim import simulator
from drivers.sim.simulator import ServoSimulator

MARK = b"<end of replies>"


def h(text: str) -> bytes:
    return bytes.fromhex(text)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Host:
    """The bus master's end of the simulator's pty; the simulator's handler runs on the test's thread."""

    def __init__(self, sim: ServoSimulator) -> None:
        self.sim = sim
        sim._plug()
        self.fd = os.open(sim.port, os.O_RDWR | os.O_NOCTTY)

    def send(self, text: str) -> bytes:
        self.sim._drain(bytearray(h(text)))
        return self.replies()

    def replies(self) -> bytes:
        os.write(self.sim._master, MARK)
        got = b""
        while not got.endswith(MARK):
            ready, _, _ = select.select([self.fd], [], [], 5.0)
            assert ready, f"the marker never came; read {got.hex(' ')}"
            got += os.read(self.fd, 4096)
        return got[: -len(MARK)]

    def close(self) -> None:
        os.close(self.fd)
        self.sim.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def feetech(clock: Clock) -> Iterator[Host]:
    host = Host(ServoSimulator("feetech", (1, 2, 3), positions={1: 1000, 2: 1500, 3: 3500}, clock=clock))
    yield host
    host.close()


@pytest.fixture
def dynamixel(clock: Clock) -> Iterator[Host]:
    host = Host(ServoSimulator("dynamixel", (1, 2, 3), positions={1: 1000}, clock=clock))
    yield host
    host.close()


# ---- Feetech: what the chain answers -----------------------------------------------------


def test_a_ping_is_answered_by_the_servo_it_names(feetech: Host) -> None:
    assert feetech.send("FF FF 02 02 01 FA") == h("FF FF 02 02 00 FB")
    assert feetech.sim.received == Counter({0x01: 1})


def test_a_ping_to_an_id_not_on_the_chain_gets_no_reply(feetech: Host) -> None:
    assert feetech.send("FF FF 09 02 01 F3") == b""
    assert feetech.sim.received == Counter({0x01: 1})


def test_a_broadcast_ping_is_answered_by_every_servo_in_id_order(feetech: Host) -> None:
    assert feetech.send("FF FF FE 02 01 FE") == h("FF FF 01 02 00 FC  FF FF 02 02 00 FB  FF FF 03 02 00 FA")


def test_a_read_answers_the_bytes_asked_for(feetech: Host) -> None:
    # id 3, Present_Position (56), 2 bytes: 3500
    assert feetech.send("FF FF 03 04 02 38 02 BC") == h("FF FF 03 04 00 AC 0D 3F")
    assert feetech.sim.received == Counter({0x02: 1})


def test_a_write_is_done_and_acknowledged(feetech: Host) -> None:
    # id 1, Goal_Position (42) = 2048
    assert feetech.send("FF FF 01 05 03 2A 00 08 C4") == h("FF FF 01 02 00 FC")
    assert [s.goal for s in feetech.sim.servos.values()] == [2048, 1500, 3500]
    assert feetech.sim.received == Counter({0x03: 1})


def test_a_broadcast_write_reaches_every_servo_without_a_reply(feetech: Host) -> None:
    assert feetech.send("FF FF FE 04 03 28 01 D1") == b""  # Torque_Enable = 1
    assert [s.torque for s in feetech.sim.servos.values()] == [True, True, True]


def test_a_sync_write_gives_each_servo_its_own_data(feetech: Host) -> None:
    # Goal_Position: id 1 = 2048, id 7 (not on the chain) = 1024, id 3 = 3072; no reply
    assert feetech.send("FF FF FE 0D 83 2A 02 01 00 08 07 00 04 03 00 0C 22") == b""
    assert [s.goal for s in feetech.sim.servos.values()] == [2048, 1500, 3072]
    assert feetech.sim.received == Counter({0x83: 1})


def test_a_sync_write_or_read_to_one_id_is_not_served(feetech: Host) -> None:
    # the same sync write as above, addressed to id 1 instead of broadcast
    assert feetech.send("FF FF 01 0D 83 2A 02 01 00 08 07 00 04 03 00 0C 1F") == b""
    assert [s.goal for s in feetech.sim.servos.values()] == [1000, 1500, 3500]
    # sync read of Present_Position for id 1, addressed to id 1: ~(01 + 05 + 82 + 38 + 02 + 01) = 3C
    assert feetech.send("FF FF 01 05 82 38 02 01 3C") == b""


def test_a_sync_read_is_answered_in_the_order_asked_skipping_absent_ids(feetech: Host) -> None:
    # Present_Position of ids 3, 7, 1: ~(FE + 07 + 82 + 38 + 02 + 03 + 07 + 01) = ~0x1CC -> 33
    assert feetech.send("FF FF FE 07 82 38 02 03 07 01 33") == h("FF FF 03 04 00 AC 0D 3F  FF FF 01 04 00 E8 03 0F")


def test_a_packet_with_a_wrong_checksum_is_counted_garbled_and_not_answered(feetech: Host) -> None:
    assert feetech.send("FF FF 02 02 01 FB") == b""
    assert feetech.sim.received == Counter({"garbled": 1})


def test_packets_in_one_chunk_are_each_answered(feetech: Host) -> None:
    noise_ping_garbled_ping_garbled = "00 FF FF 01 02 01 FB  FF FF 02 02 01 FB  FF FF 03 02 01 F9  FF FF 03 01 01"
    assert feetech.send(noise_ping_garbled_ping_garbled) == h("FF FF 01 02 00 FC  FF FF 03 02 00 FA")
    assert feetech.sim.received == Counter({0x01: 2, "garbled": 2})


def test_a_packet_after_a_stray_ff_is_answered_at_once(feetech: Host) -> None:
    assert feetech.send("FF FF FF 02 02 01 FA") == h("FF FF 02 02 00 FB")
    assert feetech.sim.received == Counter({0x01: 1})


def test_a_packet_cut_short_waits_for_the_rest(feetech: Host) -> None:
    buf = bytearray(h("FF FF 02 02 01"))
    feetech.sim._drain(buf)
    assert feetech.replies() == b""
    assert buf == h("FF FF 02 02 01")
    buf += h("FA")
    feetech.sim._drain(buf)
    assert feetech.replies() == h("FF FF 02 02 00 FB")
    assert buf == b""


# ---- Feetech: faults ---------------------------------------------------------------------


PING_2, REPLY_2 = "FF FF 02 02 01 FA", h("FF FF 02 02 00 FB")


def test_no_reply_counts_down_per_packet(feetech: Host) -> None:
    feetech.sim.faults(2).no_reply = 2
    assert [feetech.send(PING_2) for _ in range(3)] == [b"", b"", REPLY_2]
    assert feetech.sim.faults(2).no_reply == 0


def test_no_reply_minus_one_lasts_until_cleared(feetech: Host) -> None:
    feetech.sim.faults(2).no_reply = -1
    assert [feetech.send(PING_2) for _ in range(3)] == [b"", b"", b""]
    feetech.sim.faults(2).no_reply = 0
    assert feetech.send(PING_2) == REPLY_2


def test_a_bad_checksum_is_the_right_one_plus_one(feetech: Host) -> None:
    feetech.sim.faults(2).bad_checksum = 1
    assert feetech.send(PING_2) == h("FF FF 02 02 00 FC")
    assert feetech.send(PING_2) == REPLY_2


def test_a_bad_checksum_wraps_past_ff(feetech: Host) -> None:
    f = feetech.sim.faults(2)
    f.error_bits, f.bad_checksum = 0xFC, 1  # ~(02 + 02 + FC) = ~0x100 -> FF
    assert feetech.send(PING_2) == h("FF FF 02 02 FC 00")
    assert feetech.send(PING_2) == h("FF FF 02 02 FC FF")


def test_a_short_reply_loses_its_last_two_bytes(feetech: Host) -> None:
    feetech.sim.faults(2).short_reply = 1
    assert feetech.send(PING_2) == h("FF FF 02 02")
    assert feetech.send(PING_2) == REPLY_2


def test_a_skipped_reply_does_not_use_up_the_other_faults(feetech: Host) -> None:
    f = feetech.sim.faults(2)
    f.no_reply, f.bad_checksum, f.short_reply = 1, 1, 1
    assert feetech.send(PING_2) == b""
    assert feetech.send(PING_2) == h("FF FF 02 02")  # corrupted, then cut: the checksum is gone
    assert (f.no_reply, f.bad_checksum, f.short_reply) == (0, 0, 0)


def test_error_bits_are_in_every_status_byte(feetech: Host) -> None:
    feetech.sim.faults(2).error_bits = 0x24
    assert feetech.send(PING_2) == h("FF FF 02 02 24 D7")


def test_an_ignored_write_is_neither_done_nor_acknowledged(feetech: Host) -> None:
    feetech.sim.faults(1).ignore_writes = 1
    assert feetech.send("FF FF 03 04 02 38 02 BC") == h("FF FF 03 04 00 AC 0D 3F")  # reads are heard
    assert feetech.send("FF FF 01 05 03 2A 00 08 C4") == b""
    assert feetech.sim.servo(1).goal == 1000
    assert feetech.send("FF FF 01 05 03 2A 00 08 C4") == h("FF FF 01 02 00 FC")
    assert feetech.sim.servo(1).goal == 2048


def test_an_ignored_sync_write_misses_only_that_servo(feetech: Host) -> None:
    feetech.sim.faults(1).ignore_writes = 1
    feetech.send("FF FF FE 0D 83 2A 02 01 00 08 07 00 04 03 00 0C 22")
    assert [s.goal for s in feetech.sim.servos.values()] == [1000, 1500, 3072]
    feetech.send("FF FF FE 0D 83 2A 02 01 00 08 07 00 04 03 00 0C 22")
    assert [s.goal for s in feetech.sim.servos.values()] == [2048, 1500, 3072]


def test_an_ignored_broadcast_write_misses_only_that_servo(feetech: Host) -> None:
    feetech.sim.faults(2).ignore_writes = 1
    assert feetech.send("FF FF FE 04 03 28 01 D1") == b""  # Torque_Enable = 1
    assert [s.torque for s in feetech.sim.servos.values()] == [True, False, True]
    assert feetech.sim.faults(2).ignore_writes == 0


def test_a_late_reply_collides_with_a_packet_the_host_sends_first(feetech: Host) -> None:
    feetech.sim.faults(2).delay_s = 5.0
    os.write(feetech.fd, h("FF"))  # the host already talks: the simulator's end has a byte to read
    assert feetech.send(PING_2) == b""
    assert feetech.sim.received["collisions"] == 1
    assert feetech.send(PING_2) == b""  # the host's byte is still unread: it collides again
    assert feetech.sim.received["collisions"] == 2


def test_a_late_reply_waits_its_delay_on_the_bus_then_goes(feetech: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[tuple[list[int], float | None]] = []

    class Select:
        @staticmethod
        def select(r: list[int], w: list[int], x: list[int], timeout: float | None = None) -> Any:
            waits.append((list(r), timeout))
            return select.select(r, w, x, 0)  # the bus stays quiet: nothing to wait for

    feetech.sim.faults(2).delay_s = 0.25
    monkeypatch.setattr(simulator, "select", Select)
    assert feetech.send(PING_2) == REPLY_2
    assert waits == [([feetech.sim._master], 0.25)]
    assert feetech.sim.received["collisions"] == 0
    feetech.sim.faults(2).delay_s = 0.0
    assert feetech.send(PING_2) == REPLY_2
    assert len(waits) == 1  # no delay, no wait


# ---- Dynamixel ---------------------------------------------------------------------------


def test_a_dynamixel_ping_is_answered_with_model_number_and_firmware(dynamixel: Host) -> None:
    assert dynamixel.send("FF FF FD 00 01 03 00 01 19 4E") == h("FF FF FD 00 01 07 00 55 00 B0 04 2E ED 54")


def test_a_dynamixel_broadcast_ping_and_an_alert(dynamixel: Host) -> None:
    dynamixel.sim.faults(2).error_bits = 0x24
    assert dynamixel.send("FF FF FD 00 FE 03 00 01 31 42") == h(
        "FF FF FD 00 01 07 00 55 00 B0 04 2E ED 54"
        "FF FF FD 00 02 07 00 55 80 B0 04 2E D8 E4"
        "FF FF FD 00 03 07 00 55 00 B0 04 2E E1 74"
    )
    # Hardware_Error_Status (70), 1 byte, of id 2: the bits, with the alert in the status
    assert dynamixel.send("FF FF FD 00 02 07 00 02 46 00 01 00 36 93") == h("FF FF FD 00 02 05 00 55 80 24 82 29")


def test_a_dynamixel_read_and_write(dynamixel: Host) -> None:
    # Present_Position (132) of id 1: 1000
    assert dynamixel.send("FF FF FD 00 01 07 00 02 84 00 04 00 1D 15") == h(
        "FF FF FD 00 01 08 00 55 00 E8 03 00 00 AE 18"
    )
    # Goal_Position (116) of id 1 = 2048
    assert dynamixel.send("FF FF FD 00 01 09 00 03 74 00 00 08 00 00 42 89") == h("FF FF FD 00 01 04 00 55 00 A1 0C")
    assert dynamixel.sim.servo(1).goal == 2048


# ---- the chain -------------------------------------------------------------------------------


def test_the_chain_is_built_as_asked(clock: Clock) -> None:
    sim = ServoSimulator(
        "dynamixel", (4, 2), positions={4: 100}, homing_offsets={2: -7}, speed_steps_s=50.0, clock=clock
    )
    try:
        assert list(sim.servos) == [4, 2]
        assert [(s.id, s.position, s.get("Homing_Offset"), s.speed) for s in sim.servos.values()] == [
            (4, 100.0, 0, 50.0),
            (2, 2048.0, -7, 50.0),
        ]
        assert all(s.dialect is sim.dialect for s in sim.servos.values())
        assert (sim.dialect.name, sim.wire.name) == ("dynamixel", "dynamixel")
        assert sim.servo(4) is sim.servos[4] and sim.faults(2) is sim.servos[2].faults
        assert sim.received == Counter()
        assert sim.plugged is False
        port = Path(sim.port)
        assert port.name == "ttydynamixel" and port.parent.name.startswith("lerobot-sim-")
        assert port.parent.is_dir()
    finally:
        sim.stop()
    assert not port.parent.exists()


def test_the_default_chain_is_six_feetech_servos_mid_range() -> None:
    sim = ServoSimulator()
    try:
        assert sim.dialect.name == "feetech"
        assert [(i, s.position, s.speed) for i, s in sim.servos.items()] == [(i, 2048.0, 3000.0) for i in range(1, 7)]
    finally:
        sim.stop()


def test_step_moves_every_servo_to_the_clock_now(feetech: Host, clock: Clock) -> None:
    feetech.send("FF FF FE 04 03 28 01 D1")  # torque on everywhere
    for s in feetech.sim.servos.values():
        s.write(42, h("00 08"))  # goal 2048
    clock.t += 0.125  # 375 steps at 3000 steps/s
    feetech.sim.step()
    assert [s.position for s in feetech.sim.servos.values()] == [1375.0, 1875.0, 3125.0]


# ---- the serving thread ----------------------------------------------------------------------


def _exchange(fd: int, packet: bytes, expected: int) -> bytes:
    os.write(fd, packet)
    got = b""
    while len(got) < expected:
        ready, _, _ = select.select([fd], [], [], 5.0)
        assert ready, f"no reply; read {got.hex(' ')}"
        got += os.read(fd, 4096)
    return got


def _wait_for(condition: Any) -> None:
    deadline = time.monotonic() + 5.0
    while not condition():
        assert time.monotonic() < deadline, "the simulator's thread did not get there"
        time.sleep(0.002)


def test_started_the_chain_answers_on_its_port_and_stopping_removes_it() -> None:
    sim = ServoSimulator("feetech", (1,)).start()
    port = Path(sim.port)
    try:
        thread = sim._thread
        assert thread is not None and thread.is_alive() and thread.daemon and thread.name == "sim-feetech"
        assert sim.plugged and port.is_symlink() and os.readlink(port).startswith("/dev/pts/")
        fd = os.open(port, os.O_RDWR | os.O_NOCTTY)
        try:
            assert _exchange(fd, h("FF FF 01 02 01 FB"), 6) == h("FF FF 01 02 00 FC")
        finally:
            os.close(fd)
    finally:
        sim.stop()
    assert not thread.is_alive() and sim._thread is None
    assert sim.plugged is False and not os.path.lexists(port) and not port.parent.exists()
    assert (sim._wake_r, sim._wake_w, sim._master, sim._slave) == (-1, -1, -1, -1)
    sim.stop()  # twice: nothing left to do


def test_a_port_path_of_ones_own_is_used_and_its_directory_kept(tmp_path: Path) -> None:
    link = tmp_path / "ttyUSB-arm"
    with ServoSimulator("dynamixel", (1,), link=link) as sim:
        assert sim.port == str(link) and link.is_symlink()
        assert sim._thread is not None and sim._thread.name == "sim-dynamixel"
    assert not os.path.lexists(link) and tmp_path.is_dir()


def test_unplug_removes_the_port_and_replug_brings_a_fresh_one() -> None:
    with ServoSimulator("feetech", (1,)) as sim:
        fd = os.open(sim.port, os.O_RDWR | os.O_NOCTTY)
        # a garbled packet, then the start of a ping: once the garbled one is counted, the thread holds
        # the start of the ping in its buffer
        os.write(fd, h("FF FF 02 02 01 FB  FF FF 01"))
        _wait_for(lambda: sim.received["garbled"] == 1)
        sim.unplug()
        os.close(fd)
        assert sim.plugged is False and not os.path.lexists(sim.port)
        sim.unplug()  # twice: already out
        sim.replug()
        assert sim.plugged and os.path.lexists(sim.port)
        fd = os.open(sim.port, os.O_RDWR | os.O_NOCTTY)
        try:
            # what the old port left half-sent is gone: a whole ping is answered
            assert _exchange(fd, h("FF FF 01 02 01 FB"), 6) == h("FF FF 01 02 00 FC")
            sim.replug()  # twice: already in, the same pty
            assert _exchange(fd, h("FF FF 01 02 01 FB"), 6) == h("FF FF 01 02 00 FC")
        finally:
            os.close(fd)


def test_unplug_before_start_is_done_at_once() -> None:
    sim = ServoSimulator("feetech", (1,))
    try:
        sim.replug()
        assert sim.plugged and os.path.lexists(sim.port)
        sim.unplug()
        assert sim.plugged is False and not os.path.lexists(sim.port)
    finally:
        sim.stop()


def test_a_stale_link_left_by_a_crash_is_replaced(tmp_path: Path) -> None:
    link = tmp_path / "ttyUSB-arm"
    Path(f"{link}.new").symlink_to("/nonexistent")
    with ServoSimulator("feetech", (1,), link=link) as sim:
        assert os.readlink(link).startswith("/dev/pts/")
        assert not os.path.lexists(f"{link}.new")
        assert sim.plugged


def test_a_thread_that_does_not_answer_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[float | None] = []

    class NoAnswer:
        def set(self) -> None:
            pass

        def wait(self, timeout: float | None = None) -> bool:
            asked.append(timeout)
            return False

    sim = ServoSimulator("feetech", (1,))
    sim._thread = threading.Thread(target=lambda: None)  # a serving thread that never serves
    try:
        with monkeypatch.context() as m:
            m.setattr(simulator.threading, "Event", NoAnswer)
            with pytest.raises(RuntimeError) as e:
                sim.replug()
        assert str(e.value) == "simulator thread did not answer"
        assert asked == [5]
        assert not sim.plugged  # queued, never run
    finally:
        sim._thread = None
        with contextlib.suppress(OSError):
            sim.stop()


def test_a_quiet_bus_leaves_the_thread_ready_for_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    timed_out = threading.Event()

    class Select:
        """The serving thread's first wait times out (nothing on the bus); then waits as usual."""

        @staticmethod
        def select(r: list[int], w: list[int], x: list[int], timeout: float | None = None) -> Any:
            if not timed_out.is_set():
                timed_out.set()
                return [], [], []
            return select.select(r, w, x, timeout)

    monkeypatch.setattr(simulator, "select", Select)
    with ServoSimulator("feetech", (1,)) as sim:
        assert timed_out.wait(5.0)
        sim.unplug()  # answered: the thread went back to waiting, it did not read the silent port
        assert sim.plugged is False
        sim.replug()
        fd = os.open(sim.port, os.O_RDWR | os.O_NOCTTY)
        try:
            assert _exchange(fd, h("FF FF 01 02 01 FB"), 6) == h("FF FF 01 02 00 FC")
        finally:
            os.close(fd)
