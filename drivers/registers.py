"""Control-table entries as data: one :class:`Register` per named field.

Each vendor module builds a ``{name: Register}`` table from its datasheet; the buses only ever look
registers up by name in that table, so an address appears exactly once in the code base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Access = Literal["R", "RW"]


@dataclass(frozen=True, slots=True)
class Register:
    """One control-table field.

    ``sign_bit`` set: sign-magnitude encoding with the sign in that bit (Feetech).
    ``twos_complement``: two's-complement signed value (Dynamixel).
    Neither: unsigned.
    """

    address: int
    size: int
    access: Access = "RW"
    sign_bit: int | None = None
    twos_complement: bool = False

    def decode(self, raw: int) -> int:
        """Turn the unsigned little-endian register value into a Python int."""
        if self.sign_bit is not None:
            magnitude = raw & ((1 << self.sign_bit) - 1)
            return -magnitude if raw >> self.sign_bit & 1 else magnitude
        if self.twos_complement and raw >> (8 * self.size - 1):
            return raw - (1 << (8 * self.size))
        return raw

    def encode(self, value: int) -> int:
        """Turn a Python int into the unsigned register value; refuses values that do not fit."""
        if self.sign_bit is not None:
            limit = (1 << self.sign_bit) - 1
            if abs(value) > limit:
                raise ValueError(f"{value} does not fit a sign-magnitude field of {self.sign_bit} bits")
            return (1 << self.sign_bit) | -value if value < 0 else value
        bits = 8 * self.size
        if self.twos_complement:
            if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
                raise ValueError(f"{value} does not fit a signed {self.size}-byte field")
            return value & ((1 << bits) - 1)
        if not 0 <= value < (1 << bits):
            raise ValueError(f"{value} does not fit an unsigned {self.size}-byte field")
        return value

    def to_bytes(self, value: int) -> bytes:
        return self.encode(value).to_bytes(self.size, "little")

    def from_bytes(self, data: bytes | bytearray | memoryview, offset: int = 0) -> int:
        return self.decode(int.from_bytes(data[offset : offset + self.size], "little"))


RegisterTable = dict[str, Register]
