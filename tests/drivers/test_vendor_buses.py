"""What each vendor's bus adds to the shared one, on the simulators' ptys: the Feetech Lock around an
EEPROM write, the Feetech model number read from its register, the Dynamixel status that says "your
packet arrived damaged" (a wire problem, retried) and the Dynamixel alert's detail read.

Packets are written out by hand from the vendors' frame definitions: Feetech
``FF FF id len instr params.. sum`` with ``sum = ~(id + len + instr + params) & 0xFF`` (STS/SMS
manual, "instruction packet"); Dynamixel 2.0 ``FF FF FD 00 id lenL lenH instr params.. crcL crcH``
(e-manual, "Protocol 2.0"), whose CRCs come from the simulator's own CRC (``drivers.sim.wire``, proven
against the ROBOTIS SDK), never from the driver's codec.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from drivers.bus import SerialServoBus
from drivers.calibration import Calibration
from drivers.errors import ChecksumError, ServoFaultError
from drivers.port import SerialPort, open_serial
from drivers.sim.servo import DYNAMIXEL_OVERLOAD, Faults
from drivers.sim.simulator import ServoSimulator
from drivers.sim.wire import DynamixelWire, crc16_dxl
from drivers.vendors import bus_class


class RecordingPort:
    """The real pty port; records every packet written, and can rewrite the error byte of the next
    Dynamixel statuses it reads (re-framed by the simulator's own code)."""

    def __init__(self, inner: SerialPort) -> None:
        self.inner = inner
        self.written: list[bytes] = []
        self.on_write: Callable[[bytes], None] = lambda packet: None
        #: error bytes to put into the next single Dynamixel statuses read, one per status
        self.error_bytes: list[int] = []

    @property
    def timeout(self) -> float | None:
        return self.inner.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self.inner.timeout = value

    def read(self, size: int = 1) -> bytes:
        data = self.inner.read(size)
        if self.error_bytes and data[:4] == b"\xff\xff\xfd\x00" and len(data) >= 11:
            # one status, no byte stuffing in these tests: id at 4, error at 8, params up to the CRC
            data = DynamixelWire().status(data[4], self.error_bytes.pop(0), data[9:-2])
        return data

    def write(self, data: bytes) -> int | None:
        self.written.append(bytes(data))
        self.on_write(bytes(data))
        return self.inner.write(data)

    def reset_input_buffer(self) -> None:
        self.inner.reset_input_buffer()

    def close(self) -> None:
        self.inner.close()


Start = Callable[..., tuple[SerialServoBus, ServoSimulator, RecordingPort]]


def feetech_packet(servo_id: int, instruction: int, *params: int) -> bytes:
    body = bytes([servo_id, len(params) + 2, instruction, *params])
    return b"\xff\xff" + body + bytes([~sum(body) & 0xFF])


def dynamixel_packet(servo_id: int, instruction: int, *params: int) -> bytes:
    length = len(params) + 3
    head = bytes([0xFF, 0xFF, 0xFD, 0x00, servo_id, length & 0xFF, length >> 8, instruction, *params])
    crc = crc16_dxl(head)
    return head + bytes([crc & 0xFF, crc >> 8])


@pytest.fixture
def recorded() -> Iterator[Start]:
    opened: list[tuple[SerialServoBus, ServoSimulator]] = []

    def start(
        protocol: str, calibration: Calibration, offsets: dict[int, int] | None = None, **kw: object
    ) -> tuple[SerialServoBus, ServoSimulator, RecordingPort]:
        sim = ServoSimulator(protocol, range(1, 7), homing_offsets=offsets).start()  # type: ignore[arg-type]
        ports: list[RecordingPort] = []

        def opener(path: str, baud: int, timeout_s: float) -> SerialPort:
            ports.append(RecordingPort(open_serial(path, baud, timeout_s)))
            return ports[-1]

        bus = bus_class(protocol)(sim.port, calibration, opener=opener, **kw)  # type: ignore[arg-type]
        opened.append((bus, sim))
        bus.connect()
        return bus, sim, ports[-1]

    yield start
    for bus, sim in opened:
        for servo in sim.servos.values():
            servo.faults = Faults()
        try:
            bus.disconnect()
        finally:
            sim.stop()


def test_an_unknown_protocol_is_refused_by_name() -> None:
    with pytest.raises(ValueError) as e:
        bus_class("scs")
    assert str(e.value) == "unknown servo protocol 'scs'; expected feetech or dynamixel"


class TestFeetech:
    def test_an_eeprom_write_is_unlocked_then_locked_again(self, so101: Calibration, recorded: Start) -> None:
        offsets = {j.id: j.homing_offset for j in so101.joints.values()}
        offsets[2] = 0  # shoulder_lift's servo holds 0; the file says so101's value
        _, sim, port = recorded("feetech", so101, offsets, on_calibration_mismatch="write")
        writes = [p for p in port.written if p[4] == 0x03]
        file_offset = so101.joints["shoulder_lift"].homing_offset
        assert file_offset > 0  # sign-magnitude: a positive offset is its plain 2 bytes
        assert writes[:3] == [
            # WRITE Lock (SRAM 55 = 0x37) = 0
            feetech_packet(2, 0x03, 0x37, 0x00),
            # WRITE Homing_Offset (EEPROM 31 = 0x1F), 2 bytes little-endian
            feetech_packet(2, 0x03, 0x1F, file_offset & 0xFF, file_offset >> 8),
            # WRITE Lock = 1
            feetech_packet(2, 0x03, 0x37, 0x01),
        ]
        assert feetech_packet(2, 0x03, 0x37, 0x00) == bytes([0xFF, 0xFF, 0x02, 0x04, 0x03, 0x37, 0x00, 0xBF])
        assert sim.servo(2).get("Lock") == 1
        assert sim.servo(2).get("Homing_Offset") == file_offset

    def test_a_ping_reads_the_model_number_register(self, so101: Calibration, recorded: Start) -> None:
        bus, _, port = recorded("feetech", so101, {j.id: j.homing_offset for j in so101.joints.values()})
        del port.written[:]
        assert bus.ping(3) == 777
        # PING id 3, then READ Model_Number: address 3, 2 bytes
        assert port.written == [feetech_packet(3, 0x01), feetech_packet(3, 0x02, 0x03, 0x02)]
        assert feetech_packet(3, 0x02, 0x03, 0x02) == bytes([0xFF, 0xFF, 0x03, 0x04, 0x02, 0x03, 0x02, 0xF1])


class TestDynamixel:
    def test_a_damaged_packet_status_is_retried_as_a_checksum_error(self, so101: Calibration, recorded: Start) -> None:
        bus, sim, port = recorded("dynamixel", so101, {j.id: j.homing_offset for j in so101.joints.values()})
        port.error_bytes = [0x03]  # "CRC error": the servo got our packet damaged
        assert bus.read_id(1, "Torque_Enable") == 0
        assert bus.last_attempts == 2
        port.error_bytes = [0x83, 0x83, 0x83]  # the same with the alert bit set: still the wire's fault
        with pytest.raises(ChecksumError) as e:
            bus.read_id(1, "Torque_Enable")
        assert str(e.value) == (
            f"read Torque_Enable of id 1 on {sim.port} failed after 3 attempt(s): "
            "servo id 1 received a corrupted packet"
        )
        assert (e.value.servo_id, e.value.attempts) == (1, 3)
        assert isinstance(e.value.__cause__, ChecksumError)
        assert e.value.__cause__.servo_id == 1

    def test_an_error_number_without_the_alert_reads_no_hardware_status(
        self, so101: Calibration, recorded: Start
    ) -> None:
        bus, _, port = recorded("dynamixel", so101, {j.id: j.homing_offset for j in so101.joints.values()})
        del port.written[:]
        port.error_bytes = [0x06]  # "data limit error", no alert bit
        with pytest.raises(ServoFaultError) as e:
            bus.read_id(2, "Present_Position")
        assert str(e.value) == (
            "joint 'shoulder_lift' (servo id 2) reports fault data limit error (error byte 0x06); "
            "check load, supply voltage and temperature before re-enabling torque"
        )
        assert e.value.bits == ("data limit error",)
        # READ Present_Position (132 = 0x84, 4 bytes) and nothing else: no Hardware_Error_Status read
        assert port.written == [dynamixel_packet(2, 0x02, 0x84, 0x00, 0x04, 0x00)]

    def test_an_alert_names_the_hardware_bits_read_from_address_70(self, so101: Calibration, recorded: Start) -> None:
        bus, sim, port = recorded("dynamixel", so101, {j.id: j.homing_offset for j in so101.joints.values()})
        sim.faults(4).error_bits = DYNAMIXEL_OVERLOAD
        del port.written[:]
        with pytest.raises(ServoFaultError) as e:
            bus.read_id(4, "Present_Position")
        assert e.value.bits == ("overload",)
        assert e.value.raw == 0x80
        # READ Present_Position, then READ Hardware_Error_Status (70 = 0x46, 1 byte) once
        assert port.written == [
            dynamixel_packet(4, 0x02, 0x84, 0x00, 0x04, 0x00),
            dynamixel_packet(4, 0x02, 0x46, 0x00, 0x01, 0x00),
        ]

    def test_the_alert_detail_read_is_tried_once_and_its_failure_leaves_the_fault(
        self, so101: Calibration, recorded: Start
    ) -> None:
        bus, sim, port = recorded("dynamixel", so101, {j.id: j.homing_offset for j in so101.joints.values()})
        sim.faults(4).error_bits = DYNAMIXEL_OVERLOAD
        detail = dynamixel_packet(4, 0x02, 0x46, 0x00, 0x01, 0x00)

        def silence_the_detail(packet: bytes) -> None:
            if packet == detail:
                sim.faults(4).no_reply = -1

        port.on_write = silence_the_detail
        del port.written[:]
        with pytest.raises(ServoFaultError) as e:
            bus.read_id(4, "Present_Position")
        sim.faults(4).no_reply = 0
        assert e.value.bits == ("hardware alert",)
        assert str(e.value) == (
            "joint 'wrist_flex' (servo id 4) reports fault hardware alert (error byte 0x80); "
            "check load, supply voltage and temperature before re-enabling torque"
        )
        assert port.written == [dynamixel_packet(4, 0x02, 0x84, 0x00, 0x04, 0x00), detail]
