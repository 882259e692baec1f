"""Dynamixel Protocol 2.0 packets.

Frame::

    FF FF FD 00  ID  LEN_L LEN_H  INSTR  PARAM...  CRC_L CRC_H
    LEN = (stuffed) INSTR + PARAM bytes + 2 CRC bytes; status packets use INSTR 0x55 then ERROR.

CRC-16 with polynomial 0x8005 (non-reflected, initial value 0) over everything from the first
header byte to the last parameter. Byte stuffing: inside INSTR..PARAM every ``FF FF FD`` gets an
extra ``FD`` so the header can never appear in a payload.
Source: ROBOTIS e-manual, "DYNAMIXEL Protocol 2.0" (emanual.robotis.com/docs/en/dxl/protocol2/).
"""

from __future__ import annotations

from collections.abc import Sequence

from drivers.errors import ChecksumError, GarbledPacketError
from drivers.packets import Status

HEADER = b"\xff\xff\xfd\x00"
BROADCAST_ID = 0xFE

# Instruction codes (Protocol 2.0, "Instruction" table).
PING = 0x01
READ = 0x02
WRITE = 0x03
REG_WRITE = 0x04
ACTION = 0x05
REBOOT = 0x08
STATUS = 0x55
SYNC_READ = 0x82
SYNC_WRITE = 0x83

# Status packet error field: bit 7 is the hardware Alert flag, bits 0-6 an error number.
ALERT = 0x80
ERROR_NUMBERS: dict[int, str] = {
    0x01: "result fail",
    0x02: "instruction error",
    0x03: "crc error",
    0x04: "data range error",
    0x05: "data length error",
    0x06: "data limit error",
    0x07: "access error",
}
CRC_ERROR = 0x03

# Hardware Error Status register (address 70) bits, X-series e-manual.
HARDWARE_ERROR_BITS: dict[int, str] = {
    0x01: "voltage",
    0x04: "overheat",
    0x08: "encoder",
    0x10: "electrical shock",
    0x20: "overload",
}


def decode_error(error: int, hardware_status: int = 0) -> tuple[str, ...]:
    names: list[str] = []
    number = error & 0x7F
    if number:
        names.append(ERROR_NUMBERS.get(number, f"error number {number}"))
    if error & ALERT:
        hw = [name for bit, name in HARDWARE_ERROR_BITS.items() if hardware_status & bit]
        names.extend(hw or ["hardware alert"])
    return tuple(names)


def _make_crc_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC_TABLE = _make_crc_table()


def crc16(data: bytes | bytearray | memoryview) -> int:
    """Table-driven CRC-16/BUYPASS (poly 0x8005), one table lookup per byte."""
    crc = 0
    table = _CRC_TABLE
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ table[((crc >> 8) ^ byte) & 0xFF]
    return crc


def stuff(payload: bytes) -> bytes:
    # bytes.replace scans left to right without overlap, which is exactly the stuffing rule.
    return payload.replace(b"\xff\xff\xfd", b"\xff\xff\xfd\xfd")


def unstuff(payload: bytes) -> bytes:
    return payload.replace(b"\xff\xff\xfd\xfd", b"\xff\xff\xfd")


class DynamixelCodec:
    name = "dynamixel"
    header_size = 7  # FF FF FD 00 ID LEN_L LEN_H
    broadcast_id = BROADCAST_ID
    address_size = 2

    def _frame(self, servo_id: int, payload: bytes) -> bytes:
        if not 0 <= servo_id <= 0xFE:
            raise ValueError(f"servo id {servo_id} is outside 0..254")
        stuffed = stuff(payload)
        head = HEADER + bytes((servo_id,)) + (len(stuffed) + 2).to_bytes(2, "little") + stuffed
        return head + crc16(head).to_bytes(2, "little")

    def instruction(self, servo_id: int, instruction: int, params: bytes) -> bytes:
        return self._frame(servo_id, bytes((instruction,)) + params)

    def status(self, servo_id: int, error: int, params: bytes) -> bytes:
        return self._frame(servo_id, bytes((STATUS, error)) + params)

    def body_length(self, header: bytes) -> int:
        if len(header) != 7 or header[:4] != HEADER:
            raise GarbledPacketError(f"bad Dynamixel header {header.hex(' ')}")
        length = int.from_bytes(header[5:7], "little")
        if length < 3:
            raise GarbledPacketError(f"Dynamixel length {length} is below the minimum of 3")
        return length

    def _unframe(self, packet: bytes) -> tuple[int, bytes]:
        length = self.body_length(packet[:7])
        if len(packet) != 7 + length:
            raise GarbledPacketError(f"Dynamixel packet is {len(packet)} bytes, its length says {7 + length}")
        expected = crc16(memoryview(packet)[:-2])
        got = int.from_bytes(packet[-2:], "little")
        if got != expected:
            raise ChecksumError(
                f"Dynamixel CRC 0x{got:04X} != 0x{expected:04X} in {packet.hex(' ')}", servo_id=packet[4]
            )
        return packet[4], unstuff(packet[7:-2])

    def decode_status(self, packet: bytes) -> Status:
        servo_id, payload = self._unframe(packet)
        if len(payload) < 2 or payload[0] != STATUS:
            raise GarbledPacketError(f"not a Dynamixel status packet: {packet.hex(' ')}", servo_id=servo_id)
        return Status(servo_id, payload[1], payload[2:])

    def header_index(self, buffer: bytes | bytearray) -> int:
        return buffer.find(HEADER)

    def status_size(self, n_params: int) -> int:
        return 11 + n_params

    def ping(self, servo_id: int) -> bytes:
        return self.instruction(servo_id, PING, b"")

    def read(self, servo_id: int, address: int, size: int) -> bytes:
        return self.instruction(servo_id, READ, address.to_bytes(2, "little") + size.to_bytes(2, "little"))

    def write(self, servo_id: int, address: int, data: bytes) -> bytes:
        return self.instruction(servo_id, WRITE, address.to_bytes(2, "little") + data)

    def sync_read(self, ids: Sequence[int], address: int, size: int) -> bytes:
        params = address.to_bytes(2, "little") + size.to_bytes(2, "little") + bytes(ids)
        return self.instruction(BROADCAST_ID, SYNC_READ, params)

    def sync_write(self, address: int, size: int, items: Sequence[tuple[int, bytes]]) -> bytes:
        params = bytearray(address.to_bytes(2, "little") + size.to_bytes(2, "little"))
        for servo_id, data in items:
            if len(data) != size:
                raise ValueError(f"sync write to id {servo_id}: {len(data)} data bytes, expected {size}")
            params.append(servo_id)
            params += data
        return self.instruction(BROADCAST_ID, SYNC_WRITE, bytes(params))


CODEC = DynamixelCodec()
