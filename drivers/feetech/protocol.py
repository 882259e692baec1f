"""Feetech SCS/STS serial protocol packets.

Frame (both directions)::

    FF FF  ID  LEN  INSTR|ERROR  PARAM...  CHECKSUM
    LEN = number of params + 2, CHECKSUM = ~(ID + LEN + INSTR + sum(PARAM)) & 0xFF

Source: Feetech "SCS/STS communication protocol manual" (FT-SMS-STS-emanual, doc.feetech.cn), the
same layout the vendor's ``scservo_sdk/protocol_packet_handler.py`` implements. Multi-byte values on
STS servos are little-endian.
"""

from __future__ import annotations

from collections.abc import Sequence

from drivers.errors import ChecksumError, GarbledPacketError
from drivers.packets import Status

HEADER = b"\xff\xff"
BROADCAST_ID = 0xFE

# Instruction codes (protocol manual, "instruction types").
PING = 0x01
READ = 0x02
WRITE = 0x03
REG_WRITE = 0x04
ACTION = 0x05
SYNC_READ = 0x82
SYNC_WRITE = 0x83

# Status error byte bits, as named in scservo_sdk (ERRBIT_*).
ERROR_BITS: dict[int, str] = {
    0x01: "voltage",
    0x02: "angle",
    0x04: "overheat",
    0x08: "overcurrent",
    0x20: "overload",
}


def decode_error(error: int) -> tuple[str, ...]:
    names = tuple(name for bit, name in ERROR_BITS.items() if error & bit)
    unknown = error & ~sum(ERROR_BITS)
    return (*names, f"bit 0x{unknown:02X}") if unknown else names


def checksum(body: bytes | bytearray | memoryview) -> int:
    """``body`` is ID..last param; ``sum`` over bytes runs in C, no per-byte Python loop."""
    return ~sum(body) & 0xFF


class FeetechCodec:
    name = "feetech"
    header_size = 4  # FF FF ID LEN
    broadcast_id = BROADCAST_ID
    address_size = 1

    def _frame(self, servo_id: int, code: int, params: bytes) -> bytes:
        if not 0 <= servo_id <= 0xFE:
            raise ValueError(f"servo id {servo_id} is outside 0..254")
        if len(params) > 0xFD:
            raise ValueError(f"{len(params)} parameter bytes do not fit one Feetech packet")
        body = bytes((servo_id, len(params) + 2, code)) + params
        return HEADER + body + bytes((checksum(body),))

    def instruction(self, servo_id: int, instruction: int, params: bytes) -> bytes:
        return self._frame(servo_id, instruction, params)

    def status(self, servo_id: int, error: int, params: bytes) -> bytes:
        return self._frame(servo_id, error, params)

    def body_length(self, header: bytes) -> int:
        if len(header) != 4 or header[:2] != HEADER:
            raise GarbledPacketError(f"bad Feetech header {header.hex(' ')}")
        if header[3] < 2:
            raise GarbledPacketError(f"Feetech length byte {header[3]} is below the minimum of 2")
        return header[3]

    def _unframe(self, packet: bytes) -> tuple[int, int, bytes]:
        length = self.body_length(packet[:4])
        if len(packet) != 4 + length:
            raise GarbledPacketError(
                f"Feetech packet is {len(packet)} bytes, its length byte says {4 + length}"
            )
        expected = checksum(memoryview(packet)[2:-1])
        if packet[-1] != expected:
            raise ChecksumError(
                f"Feetech checksum 0x{packet[-1]:02X} != 0x{expected:02X} in {packet.hex(' ')}",
                servo_id=packet[2],
            )
        return packet[2], packet[4], packet[5:-1]

    def decode_status(self, packet: bytes) -> Status:
        servo_id, error, params = self._unframe(packet)
        return Status(servo_id, error, params)

    def header_index(self, buffer: bytes | bytearray) -> int:
        return buffer.find(HEADER)

    def status_size(self, n_params: int) -> int:
        return 6 + n_params

    def ping(self, servo_id: int) -> bytes:
        return self._frame(servo_id, PING, b"")

    def read(self, servo_id: int, address: int, size: int) -> bytes:
        return self._frame(servo_id, READ, bytes((address, size)))

    def write(self, servo_id: int, address: int, data: bytes) -> bytes:
        return self._frame(servo_id, WRITE, bytes((address,)) + data)

    def sync_read(self, ids: Sequence[int], address: int, size: int) -> bytes:
        return self._frame(BROADCAST_ID, SYNC_READ, bytes((address, size, *ids)))

    def sync_write(self, address: int, size: int, items: Sequence[tuple[int, bytes]]) -> bytes:
        params = bytearray((address, size))
        for servo_id, data in items:
            if len(data) != size:
                raise ValueError(f"sync write to id {servo_id}: {len(data)} data bytes, expected {size}")
            params.append(servo_id)
            params += data
        return self._frame(BROADCAST_ID, SYNC_WRITE, bytes(params))


CODEC = FeetechCodec()
