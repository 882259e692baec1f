"""Packets as a servo sees them: instruction packets in, status packets out, for both vendors.

Written from the vendors' documents, apart from the drivers' codecs (``drivers.packets`` and the
``protocol`` modules): a bug made the same way on both sides of the wire would otherwise be invisible.
``tests/drivers/test_sim_vendor_sdk.py`` checks these against the vendors' own SDKs.

Feetech SCS/STS (FT-SMS-STS user manual, "communication protocol")::

    0xFF 0xFF  ID  Length  Instruction|Error  Param 1..N  Checksum
    Length = N + 2;  Checksum = NOT(ID + Length + Instruction + Param 1 + ... + Param N), low byte

Dynamixel Protocol 2.0 (ROBOTIS e-manual, /docs/en/dxl/protocol2/)::

    0xFF 0xFF 0xFD 0x00  ID  Len_L Len_H  Instruction  Param 1..N  CRC_L CRC_H
    status packets: Instruction = 0x55, then Error, then the parameters
    Length = (stuffed) bytes from Instruction to CRC_H;  CRC-16 (polynomial 0x8005, initial 0,
    MSB first, no reflection) over every byte from the first header byte to the last parameter,
    computed after stuffing; stuffing: after each 0xFF 0xFF 0xFD inside Instruction..Parameters,
    an extra 0xFD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol


@dataclass(frozen=True, slots=True)
class Request:
    """One instruction packet as the servo chain received it."""

    servo_id: int
    instruction: int
    params: bytes


#: What :meth:`ServoWire.take` returns for bytes that cannot be a valid packet (a real servo drops them).
GARBLED: Final = "garbled"


class ServoWire(Protocol):
    """Framing on the servo side of the bus."""

    name: str
    broadcast_id: int
    address_size: int  # bytes per address (and per length) in read/write parameters

    def take(self, buf: bytearray) -> Request | str | None:
        """Remove one packet from the front of ``buf``: a :class:`Request`, :data:`GARBLED`, or
        None when more bytes are needed (``buf`` then keeps what may still start a packet)."""
        ...

    def status(self, servo_id: int, error: int, params: bytes) -> bytes:
        """The servo's status (reply) packet."""
        ...


class FeetechWire:
    name = "feetech"
    broadcast_id = 0xFE
    address_size = 1

    @staticmethod
    def checksum(body: bytes) -> int:
        total = 0
        for byte in body:
            total += byte
        return (~total) & 0xFF

    def take(self, buf: bytearray) -> Request | str | None:
        while True:
            start = buf.find(b"\xff\xff")
            if start < 0:
                # a lone trailing 0xFF may be the first half of the next header
                del buf[: len(buf) - 1 if buf[-1:] == b"\xff" else len(buf)]
                return None
            del buf[:start]
            if len(buf) < 4:
                return None
            if buf[2] != 0xFF:
                break
            del buf[:1]  # 0xFF 0xFF 0xFF: the header may start one byte later
        servo_id, length = buf[2], buf[3]
        if length < 2:
            del buf[:2]
            return GARBLED
        if len(buf) < 4 + length:
            return None
        packet = bytes(buf[: 4 + length])
        del buf[: 4 + length]
        if self.checksum(packet[2:-1]) != packet[-1]:
            return GARBLED
        return Request(servo_id, packet[4], packet[5:-1])

    def status(self, servo_id: int, error: int, params: bytes) -> bytes:
        body = bytes([servo_id, len(params) + 2, error]) + params
        return b"\xff\xff" + body + bytes([self.checksum(body)])


DXL_HEADER = b"\xff\xff\xfd\x00"
DXL_STATUS = 0x55


def crc16_dxl(data: bytes) -> int:
    """CRC-16/BUYPASS bit by bit, as the e-manual's definition reads (not its lookup table)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def stuff(payload: bytes) -> bytes:
    out = bytearray()
    for i, byte in enumerate(payload):
        out.append(byte)
        if i >= 2 and payload[i - 2 : i + 1] == b"\xff\xff\xfd":
            out.append(0xFD)
    return bytes(out)


def unstuff(payload: bytes) -> bytes:
    out = bytearray()
    i = 0
    while i < len(payload):
        out.append(payload[i])
        if i >= 2 and payload[i - 2 : i + 1] == b"\xff\xff\xfd" and payload[i + 1 : i + 2] == b"\xfd":
            i += 1  # drop the stuffed 0xFD
        i += 1
    return bytes(out)


class DynamixelWire:
    name = "dynamixel"
    broadcast_id = 0xFE
    address_size = 2

    def take(self, buf: bytearray) -> Request | str | None:
        start = buf.find(DXL_HEADER)
        if start < 0:
            del buf[: max(0, len(buf) - 3)]  # keep what may be the start of a header
            return None
        del buf[:start]
        if len(buf) < 7:
            return None
        length = buf[5] | buf[6] << 8
        if length < 3:
            del buf[:4]
            return GARBLED
        if len(buf) < 7 + length:
            return None
        packet = bytes(buf[: 7 + length])
        del buf[: 7 + length]
        if crc16_dxl(packet[:-2]) != packet[-2] | packet[-1] << 8:
            return GARBLED
        payload = unstuff(packet[7:-2])
        return Request(packet[4], payload[0], payload[1:])

    def status(self, servo_id: int, error: int, params: bytes) -> bytes:
        payload = stuff(bytes([DXL_STATUS, error]) + params)
        size = len(payload) + 2
        head = DXL_HEADER + bytes([servo_id, size & 0xFF, size >> 8]) + payload
        crc = crc16_dxl(head)
        return head + bytes([crc & 0xFF, crc >> 8])
