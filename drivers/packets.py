"""What a vendor packet codec offers the shared bus (the simulator has its own, in ``drivers.sim.wire``).

A codec is pure byte work: no I/O, no state. Framing is the same idea for both vendors: a
fixed-size header that carries the length, then exactly that many bytes, so the bus always reads
exact lengths and never scans byte by byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Status:
    """A decoded status (reply) packet."""

    servo_id: int
    error: int
    params: bytes


class PacketCodec(Protocol):
    """Encode instruction packets and decode status packets for one protocol."""

    name: str
    header_size: int
    broadcast_id: int
    address_size: int

    def instruction(self, servo_id: int, instruction: int, params: bytes) -> bytes: ...
    def status(self, servo_id: int, error: int, params: bytes) -> bytes: ...
    def body_length(self, header: bytes) -> int: ...
    def decode_status(self, packet: bytes) -> Status: ...
    def header_index(self, buffer: bytes | bytearray) -> int: ...
    def status_size(self, n_params: int) -> int: ...

    def ping(self, servo_id: int) -> bytes: ...
    def read(self, servo_id: int, address: int, size: int) -> bytes: ...
    def write(self, servo_id: int, address: int, data: bytes) -> bytes: ...
    def sync_read(self, ids: Sequence[int], address: int, size: int) -> bytes: ...
    def sync_write(self, address: int, size: int, items: Sequence[tuple[int, bytes]]) -> bytes: ...
