"""The simulators, proven against the vendors' own SDKs before they judge the drivers.

Feetech's ``scservo_sdk`` (PyPI ``feetech-servo-sdk``) and ROBOTIS' ``dynamixel_sdk`` (PyPI
``dynamixel-sdk``) act as the bus master on the simulator's pseudo-terminal: they frame, checksum,
byte-stuff and parse exactly as they do against real servos, so a framing or checksum bug in
``drivers/sim/wire.py`` fails here even when the drivers' codecs share it. Addresses come from the
datasheets (STS3215 memory table, XL330 control table), written out here on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import serial

from drivers.sim.simulator import ServoSimulator

scs = pytest.importorskip("scservo_sdk", reason="the dev extra installs feetech-servo-sdk")
dxl = pytest.importorskip("dynamixel_sdk", reason="the dev extra installs dynamixel-sdk")

BAUD = 1_000_000
IDS = (1, 2, 3)
POSITIONS = {1: 1000, 2: 2048, 3: 3500}

# STS3215 memory table
STS_MODEL, STS_TORQUE, STS_GOAL, STS_LOCK, STS_PRESENT = 3, 40, 42, 55, 56
# XL330 control table
X_TORQUE, X_HW_ERROR, X_PROFILE_VELOCITY, X_GOAL, X_PRESENT = 64, 70, 112, 116, 132


@pytest.fixture(autouse=True)
def _patient_sdks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both SDKs wait 2 x 16 ms (a USB adapter's latency timer) for a reply; the simulator's thread
    # on a loaded two-core machine can take longer. Waiting longer changes no byte on the wire.
    monkeypatch.setattr(scs.port_handler, "LATENCY_TIMER", 250)
    monkeypatch.setattr(dxl.port_handler, "LATENCY_TIMER", 250)


@pytest.fixture
def feetech() -> Iterator[tuple[ServoSimulator, Any, Any]]:
    with ServoSimulator("feetech", IDS, positions=POSITIONS) as sim:
        port = scs.PortHandler(sim.port)
        assert port.openPort() and port.setBaudRate(BAUD)
        try:
            yield sim, port, scs.PacketHandler(0)  # 0: STS servos are little-endian
        finally:
            port.closePort()


@pytest.fixture
def dynamixel() -> Iterator[tuple[ServoSimulator, Any, Any]]:
    with ServoSimulator("dynamixel", IDS, positions=POSITIONS) as sim:
        port = dxl.PortHandler(sim.port)
        assert port.openPort() and port.setBaudRate(BAUD)
        try:
            yield sim, port, dxl.PacketHandler(2.0)
        finally:
            port.closePort()


def ok(result: int, error: int = 0) -> bool:
    return result == scs.COMM_SUCCESS and error == 0


# ---- Feetech -------------------------------------------------------------------------------


def test_feetech_sdk_ping(feetech: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = feetech
    for servo_id in IDS:
        model, result, error = ph.ping(port, servo_id)  # the SDK pings, then reads Model_Number
        assert ok(result, error) and model == 777
    _, result, _ = ph.ping(port, 9)
    assert result == scs.COMM_RX_TIMEOUT
    assert sim.received[0x01] == 4 and sim.received[0x02] == 3


def test_feetech_sdk_read_and_write(feetech: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = feetech
    position, result, error = ph.read2ByteTxRx(port, 3, STS_PRESENT)
    assert ok(result, error) and position == 3500
    assert ok(*ph.write1ByteTxRx(port, 2, STS_LOCK, 0))
    assert sim.servo(2).get("Lock") == 0
    assert ok(*ph.write1ByteTxRx(port, 2, STS_TORQUE, 1))
    assert ok(*ph.write2ByteTxRx(port, 2, STS_GOAL, 0x0FFF))
    assert sim.servo(2).torque and sim.servo(2).goal == 0x0FFF
    assert sim.servo(2).goal_log[-1][1] == 0x0FFF
    value, result, error = ph.read2ByteTxRx(port, 2, STS_GOAL)
    assert ok(result, error) and value == 0x0FFF


def test_feetech_sdk_sync_read_and_write(feetech: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = feetech
    reader = scs.GroupSyncRead(port, ph, STS_PRESENT, 2)
    for servo_id in IDS:
        assert reader.addParam(servo_id)
    assert reader.txRxPacket() == scs.COMM_SUCCESS
    assert {i: reader.getData(i, STS_PRESENT, 2) for i in IDS} == POSITIONS

    writer = scs.GroupSyncWrite(port, ph, STS_GOAL, 2)
    goals = {1: 1100, 2: 0x01FF, 3: 0x0FFE}  # 0x01FF and 0x0FFE: bytes 0xFF in the payload
    for servo_id, goal in goals.items():
        assert writer.addParam(servo_id, [goal & 0xFF, goal >> 8])
    assert writer.txPacket() == scs.COMM_SUCCESS  # broadcast: no reply
    assert ok(*ph.ping(port, 1)[1:])  # one round trip: the sync write has been handled
    assert {i: sim.servo(i).goal_log[-1][1] for i in IDS} == goals


def test_feetech_sdk_sees_the_fault_bits(feetech: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = feetech
    sim.faults(1).error_bits = 0x20 | 0x04  # overload, overheat: in the status byte itself
    _, result, error = ph.read2ByteTxRx(port, 1, STS_PRESENT)
    assert result == scs.COMM_SUCCESS and error == 0x24
    assert "Overheat" in ph.getRxPacketError(error)


def test_feetech_sdk_rejects_a_corrupted_reply(feetech: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = feetech
    sim.faults(1).bad_checksum = 1
    _, result, _ = ph.read2ByteTxRx(port, 1, STS_PRESENT)
    assert result == scs.COMM_RX_CORRUPT
    _, result, _ = ph.read2ByteTxRx(port, 1, STS_PRESENT)
    assert result == scs.COMM_SUCCESS


def test_feetech_sim_drops_a_packet_with_a_bad_checksum(feetech: tuple[ServoSimulator, Any, Any]) -> None:
    sim, _, _ = feetech
    good = bytes([0xFF, 0xFF, 0x01, 0x04, 0x02, STS_PRESENT, 0x02])
    good += bytes([~sum(good[2:]) & 0xFF])
    with serial.Serial(sim.port, BAUD, timeout=0.3) as raw:
        raw.write(good[:-1] + bytes([(good[-1] + 1) & 0xFF]))  # the uncomplemented sum, say
        assert raw.read(8) == b""
        raw.write(good)
        reply = raw.read(8)
    assert reply[:5] == bytes([0xFF, 0xFF, 0x01, 0x04, 0x00]) and int.from_bytes(reply[5:7], "little") == 1000
    assert reply[7] == ~sum(reply[2:7]) & 0xFF
    assert sim.received["garbled"] == 1


# ---- Dynamixel -----------------------------------------------------------------------------


def test_dynamixel_sdk_ping(dynamixel: tuple[ServoSimulator, Any, Any]) -> None:
    _, port, ph = dynamixel
    for servo_id in IDS:
        model, result, error = ph.ping(port, servo_id)
        assert ok(result, error) and model == 1200
    _, result, _ = ph.ping(port, 9)
    assert result == dxl.COMM_RX_TIMEOUT


def test_dynamixel_sdk_read_and_write(dynamixel: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = dynamixel
    position, result, error = ph.read4ByteTxRx(port, 3, X_PRESENT)
    assert ok(result, error) and position == 3500
    assert ok(*ph.write1ByteTxRx(port, 2, X_TORQUE, 1))
    assert ok(*ph.write4ByteTxRx(port, 2, X_GOAL, 2500))
    assert sim.servo(2).torque and sim.servo(2).goal_log[-1][1] == 2500
    value, result, error = ph.read4ByteTxRx(port, 2, X_GOAL)
    assert ok(result, error) and value == 2500


@pytest.mark.parametrize("value", [0x00FDFFFF, 0xFDFDFFFF])
def test_dynamixel_sim_stuffs_its_replies(dynamixel: tuple[ServoSimulator, Any, Any], value: int) -> None:
    # FF FF FD 00 / FF FF FD FD in a reply must go out stuffed; the SDK unstuffs what it receives, so an
    # unstuffed FF FF FD FD would reach it as FF FF FD.
    sim, port, ph = dynamixel
    sim.servo(1).mem[X_PROFILE_VELOCITY : X_PROFILE_VELOCITY + 4] = value.to_bytes(4, "little")
    read, result, error = ph.read4ByteTxRx(port, 1, X_PROFILE_VELOCITY)
    assert ok(result, error) and read == value


def test_dynamixel_sdk_sync_read_and_write(dynamixel: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = dynamixel
    reader = dxl.GroupSyncRead(port, ph, X_PRESENT, 4)
    for servo_id in IDS:
        assert reader.addParam(servo_id)
    assert reader.txRxPacket() == dxl.COMM_SUCCESS
    assert {i: reader.getData(i, X_PRESENT, 4) for i in IDS} == POSITIONS

    writer = dxl.GroupSyncWrite(port, ph, X_GOAL, 4)
    goals = {1: 1100, 2: 0x0FFF, 3: 0x0FFE}
    for servo_id, goal in goals.items():
        assert writer.addParam(servo_id, list(goal.to_bytes(4, "little")))
    assert writer.txPacket() == dxl.COMM_SUCCESS
    assert ok(*ph.ping(port, 1)[1:])
    assert {i: sim.servo(i).goal_log[-1][1] for i in IDS} == goals


def test_dynamixel_sdk_sees_the_hardware_alert(dynamixel: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = dynamixel
    sim.faults(3).error_bits = 0x20  # overload: Alert flag in the status, the bits in Hardware_Error_Status
    bits, result, error = ph.read1ByteTxRx(port, 3, X_HW_ERROR)
    assert result == dxl.COMM_SUCCESS and error == 0x80 and bits == 0x20
    assert "Hardware error" in ph.getRxPacketError(error)


def test_dynamixel_sdk_rejects_a_corrupted_reply(dynamixel: tuple[ServoSimulator, Any, Any]) -> None:
    sim, port, ph = dynamixel
    sim.faults(2).bad_checksum = 1
    _, result, _ = ph.read4ByteTxRx(port, 2, X_PRESENT)
    assert result == dxl.COMM_RX_CORRUPT
    _, result, _ = ph.read4ByteTxRx(port, 2, X_PRESENT)
    assert result == dxl.COMM_SUCCESS


def test_dynamixel_sim_unstuffs_what_the_sdk_stuffs(dynamixel: tuple[ServoSimulator, Any, Any]) -> None:
    # dynamixel-sdk 4.1.0's txPacket drops addStuffing's result when the length grows, so it sends
    # FF FF FD unstuffed; the packet is built here with the SDK's own addStuffing and updateCRC instead.
    sim, _, ph = dynamixel  # its port stays idle: the packet goes out on a second handle
    value = bytes([0xFF, 0xFF, 0xFD, 0xFD])
    packet = [0xFF, 0xFF, 0xFD, 0x00, 1, 9, 0, 0x03, X_PROFILE_VELOCITY, 0, *value, 0, 0]
    packet = ph.addStuffing(packet)
    assert packet[5] == 10  # one FD added
    crc = ph.updateCRC(0, packet, len(packet) - 2)
    packet[-2:] = [crc & 0xFF, crc >> 8]
    with serial.Serial(sim.port, BAUD, timeout=0.5) as raw:
        raw.write(bytes(packet))
        assert raw.read(11) == bytes.fromhex("ff ff fd 00 01 04 00 55 00 a1 0c")
    assert bytes(sim.servo(1).mem[X_PROFILE_VELOCITY : X_PROFILE_VELOCITY + 4]) == value
    assert not sim.servo(1).goal_log  # exactly four bytes written: the stuffed FD went no further


def test_dynamixel_sim_answers_the_e_manual_examples() -> None:
    # Instruction and status packets printed in the Protocol 2.0 e-manual, byte for byte.
    with ServoSimulator("dynamixel", [1], positions={1: 166}) as sim, serial.Serial(sim.port, BAUD, timeout=0.5) as raw:
        raw.write(bytes.fromhex("ff ff fd 00 01 07 00 02 84 00 04 00 1d 15"))  # read Present_Position
        assert raw.read(15) == bytes.fromhex("ff ff fd 00 01 08 00 55 00 a6 00 00 00 8c c0")
        raw.write(bytes.fromhex("ff ff fd 00 01 09 00 03 74 00 00 02 00 00 ca 89"))  # Goal_Position = 512
        assert raw.read(11) == bytes.fromhex("ff ff fd 00 01 04 00 55 00 a1 0c")
    assert sim.servo(1).goal_log[-1][1] == 512


def test_the_servo_side_shares_no_code_with_the_drivers() -> None:
    # A bug made the same way on both sides of the wire would be invisible: the simulated servos
    # (everything but SimArm, which connects a real driver to them) import nothing of the drivers.
    import ast
    from pathlib import Path

    forbidden = ("drivers.packets", "drivers.registers", "drivers.feetech", "drivers.dynamixel", "drivers.bus")
    sim_dir = Path(__file__).resolve().parents[2] / "drivers" / "sim"
    for path in sorted(sim_dir.glob("*.py")):
        if path.name == "arm.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not [n for n in names if n.startswith(forbidden)], f"{path.name} imports {names}"
