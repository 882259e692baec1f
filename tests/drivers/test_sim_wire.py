"""The simulators' servo-side framing, control-table fields and per-vendor parameter layouts, on
packets written out by hand.

Checksums are worked by hand (Feetech) or taken from the ROBOTIS e-manual's examples; the few
Dynamixel CRCs of packets the e-manual has no example for were computed once with ROBOTIS'
``dynamixel_sdk`` (``updateCRC``) and are written out here: a value computed by the code under test
is never an expected value.
"""

from __future__ import annotations

from drivers.sim import memory
from drivers.sim.dialect import DYNAMIXEL, FEETECH
from drivers.sim.wire import GARBLED, DynamixelWire, FeetechWire, Request, crc16_dxl, stuff, unstuff


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def buf(text: str) -> bytearray:
    return bytearray(h(text))


# ---- Feetech: 0xFF 0xFF ID Length Instruction Params Checksum ---------------------------------


def test_feetech_checksum_is_the_low_byte_of_the_complemented_sum() -> None:
    # ~(01 + 02 + 01) = ~0x04 -> 0xFB (the ping example of the Feetech protocol manual)
    assert FeetechWire.checksum(h("01 02 01")) == 0xFB
    # ~(FE + 0A + 83 + 2A + 02 + 01 + 00 + 08 + 02 + FF + 07) = ~0x2C8 -> 0x37: a sum past one byte
    assert FeetechWire.checksum(h("FE 0A 83 2A 02 01 00 08 02 FF 07")) == 0x37
    assert FeetechWire.checksum(b"") == 0xFF


def test_feetech_takes_a_ping_and_a_read_whole() -> None:
    wire = FeetechWire()
    b = buf("FF FF 01 02 01 FB")
    assert wire.take(b) == Request(1, 0x01, b"")
    assert b == b""
    b = buf("FF FF 01 04 02 2B 01 CC")
    assert wire.take(b) == Request(1, 0x02, h("2B 01"))
    assert b == b""


def test_feetech_takes_one_packet_and_leaves_the_next_in_the_buffer() -> None:
    wire = FeetechWire()
    b = buf("FF FF 01 02 01 FB  FF FF 02 02 01 FA")
    assert wire.take(b) == Request(1, 0x01, b"")
    assert b == h("FF FF 02 02 01 FA")
    assert wire.take(b) == Request(2, 0x01, b"")
    assert b == b""


def test_feetech_skips_noise_before_a_header() -> None:
    wire = FeetechWire()
    b = buf("00 13 FF 37  FF FF 01 02 01 FB")
    assert wire.take(b) == Request(1, 0x01, b"")
    assert b == b""


def test_feetech_noise_without_a_header_is_dropped_but_a_trailing_ff_is_kept() -> None:
    wire = FeetechWire()
    b = buf("00 13 37")
    assert wire.take(b) is None
    assert b == b""
    b = buf("00 13 FF")
    assert wire.take(b) is None
    assert b == h("FF")  # may be the first half of the next header
    b.extend(h("FF 01 02 01 FB"))
    assert wire.take(b) == Request(1, 0x01, b"")
    b = bytearray()
    assert wire.take(b) is None
    assert b == b""


def test_feetech_waits_for_the_rest_of_a_cut_packet() -> None:
    wire = FeetechWire()
    for part in ("FF FF", "FF FF 01", "FF FF 01 04", "FF FF 01 04 02 2B 01"):
        b = buf(part)
        assert wire.take(b) is None, part
        assert b == h(part), part  # kept whole until the rest arrives
    b = buf("FF FF 01 04 02 2B 01")
    b.extend(h("CC"))
    assert wire.take(b) == Request(1, 0x02, h("2B 01"))


def test_feetech_a_third_ff_moves_the_header_one_byte_on() -> None:
    wire = FeetechWire()
    b = buf("FF FF FF 01 02 01 FB  FF FF 02 02 01 FA")
    assert wire.take(b) == Request(1, 0x01, b"")  # at once, not when more bytes come
    assert b == h("FF FF 02 02 01 FA")
    b = buf("FF FF FF FF FF 01 02 01 FB")
    assert wire.take(b) == Request(1, 0x01, b"")
    b = buf("FF FF FF FF")
    assert wire.take(b) is None
    assert b == h("FF FF FF")  # still one byte short of a header, ID and length


def test_feetech_a_length_below_two_is_garbled_and_only_the_header_is_dropped() -> None:
    wire = FeetechWire()
    for length in ("00", "01"):
        b = buf(f"FF FF 01 {length} FF FF 02 02 01 FA")
        assert wire.take(b) == GARBLED, length
        assert b == h(f"01 {length} FF FF 02 02 01 FA"), length
        assert wire.take(b) == Request(2, 0x01, b""), length
    b = buf("FF FF 01 01")  # header, ID and length alone are enough to tell
    assert wire.take(b) == GARBLED
    assert b == h("01 01")


def test_feetech_a_wrong_checksum_is_garbled_and_the_packet_dropped() -> None:
    wire = FeetechWire()
    b = buf("FF FF 01 04 02 2B 01 CD  FF FF 02 02 01 FA")
    assert wire.take(b) == GARBLED
    assert b == h("FF FF 02 02 01 FA")
    assert wire.take(b) == Request(2, 0x01, b"")


def test_feetech_the_checksum_covers_id_length_instruction_and_params() -> None:
    wire = FeetechWire()
    # each field of the read example altered by one, with the example's checksum CC kept
    for bad in ("FF FF 02 04 02 2B 01 CC", "FF FF 01 04 03 2B 01 CC", "FF FF 01 04 02 2C 01 CC"):
        assert wire.take(buf(bad)) == GARBLED, bad


def test_feetech_status_packets() -> None:
    wire = FeetechWire()
    # the read example's reply: ~(01 + 03 + 00 + 20) = ~0x24 -> 0xDB
    assert wire.status(1, 0, h("20")) == h("FF FF 01 03 00 20 DB")
    # a ping reply with overheat and overload bits: ~(03 + 02 + 24) = ~0x29 -> 0xD6
    assert wire.status(3, 0x24, b"") == h("FF FF 03 02 24 D6")
    # two bytes of Present_Position 2048: ~(06 + 04 + 00 + 00 + 08) = ~0x12 -> 0xED
    assert wire.status(6, 0, h("00 08")) == h("FF FF 06 04 00 00 08 ED")


def test_feetech_wire_constants() -> None:
    wire = FeetechWire()
    assert (wire.name, wire.broadcast_id, wire.address_size) == ("feetech", 0xFE, 1)


# ---- Dynamixel Protocol 2.0 --------------------------------------------------------------


def test_dxl_crc_matches_the_e_manual_examples() -> None:
    assert crc16_dxl(h("FF FF FD 00 01 03 00 01")) == 0x4E19  # ping
    assert crc16_dxl(h("FF FF FD 00 01 07 00 02 84 00 04 00")) == 0x151D  # read, the CRC example
    assert crc16_dxl(h("FF FF FD 00 FE 11 00 83 74 00 04 00 01 96 00 00 00 02 AA 00 00 00")) == 0x8782
    assert crc16_dxl(b"") == 0


def test_dxl_stuffing_adds_fd_after_each_ff_ff_fd() -> None:
    assert stuff(h("FF FF FD")) == h("FF FF FD FD")
    assert stuff(h("00 FF FF FD 01")) == h("00 FF FF FD FD 01")
    assert stuff(h("FF FF FD FF FF FD")) == h("FF FF FD FD FF FF FD FD")
    assert stuff(h("FF FD FF FF 00 FD")) == h("FF FD FF FF 00 FD")
    assert stuff(b"") == b""


def test_dxl_unstuffing_drops_only_an_fd_after_ff_ff_fd() -> None:
    assert unstuff(h("FF FF FD FD")) == h("FF FF FD")
    assert unstuff(h("00 FF FF FD FD 01")) == h("00 FF FF FD 01")
    assert unstuff(h("FF FF FD FD FF FF FD FD")) == h("FF FF FD FF FF FD")
    assert unstuff(h("FF FF FD 01")) == h("FF FF FD 01")  # no stuffed byte to drop
    assert unstuff(h("FF FF FD")) == h("FF FF FD")
    assert unstuff(h("FF FF FD FD FD")) == h("FF FF FD FD")
    assert unstuff(h("FF FD FD")) == h("FF FD FD")
    assert unstuff(b"") == b""


def test_dxl_takes_the_e_manual_instruction_packets() -> None:
    wire = DynamixelWire()
    b = buf("FF FF FD 00 01 03 00 01 19 4E")
    assert wire.take(b) == Request(1, 0x01, b"")
    assert b == b""
    b = buf("FF FF FD 00 01 07 00 02 84 00 04 00 1D 15")
    assert wire.take(b) == Request(1, 0x02, h("84 00 04 00"))
    b = buf("FF FF FD 00 FE 11 00 83 74 00 04 00 01 96 00 00 00 02 AA 00 00 00 82 87")
    assert wire.take(b) == Request(0xFE, 0x83, h("74 00 04 00 01 96 00 00 00 02 AA 00 00 00"))
    assert b == b""


def test_dxl_unstuffs_the_instruction_parameters() -> None:
    # Write FF FF FD 00 at 116 on id 1, sent stuffed; CRC over the stuffed bytes (dynamixel_sdk: 0xE721)
    b = buf("FF FF FD 00 01 0A 00 03 74 00 FF FF FD FD 00 21 E7")
    assert DynamixelWire().take(b) == Request(1, 0x03, h("74 00 FF FF FD 00"))


def test_dxl_takes_one_packet_and_leaves_the_next() -> None:
    wire = DynamixelWire()
    b = buf("77 FF FF FD 00 01 03 00 01 19 4E  FF FF FD 00 01 07 00 02 84 00 04 00 1D 15")
    assert wire.take(b) == Request(1, 0x01, b"")
    assert b == h("FF FF FD 00 01 07 00 02 84 00 04 00 1D 15")


def test_dxl_noise_without_a_header_keeps_three_bytes_that_may_start_one() -> None:
    wire = DynamixelWire()
    b = buf("01 02 03 FF FF FD")
    assert wire.take(b) is None
    assert b == h("FF FF FD")
    b.extend(h("00 01 03 00 01 19 4E"))
    assert wire.take(b) == Request(1, 0x01, b"")
    for short in ("FF FF", "FF", ""):
        b = buf(short)
        assert wire.take(b) is None
        assert b == h(short)


def test_dxl_waits_for_the_rest_of_a_cut_packet() -> None:
    wire = DynamixelWire()
    for part in ("FF FF FD 00", "FF FF FD 00 01 07", "FF FF FD 00 01 07 00", "FF FF FD 00 01 07 00 02 84 00 04 00 1D"):
        b = buf(part)
        assert wire.take(b) is None, part
        assert b == h(part), part


def test_dxl_a_length_below_three_is_garbled_and_only_the_header_is_dropped() -> None:
    wire = DynamixelWire()
    for length in ("00 00", "02 00"):
        b = buf(f"FF FF FD 00 01 {length} 01")
        assert wire.take(b) == GARBLED, length
        assert b == h(f"01 {length} 01"), length
    b = buf("FF FF FD 00 01 02 00")  # header, ID and length alone are enough to tell
    assert wire.take(b) == GARBLED
    assert b == h("01 02 00")


def test_dxl_the_length_is_little_endian() -> None:
    # 0x0103 bytes after the length field: not there yet, so the packet waits (0x0301 would too,
    # but a length read as its low byte alone, 3, would take a ping of the first bytes)
    b = buf("FF FF FD 00 01 03 01 01 19 4E")
    assert DynamixelWire().take(b) is None
    assert b == h("FF FF FD 00 01 03 01 01 19 4E")


def test_dxl_a_packet_longer_than_255_bytes_is_taken_whole() -> None:
    # write 254 zero bytes at 256 on id 1: length 1 + 256 + 2 = 259 = 0x0103 (dynamixel_sdk: CRC 0xB4BE)
    b = bytearray(h("FF FF FD 00 01 03 01 03 00 01") + bytes(254) + h("BE B4"))
    assert DynamixelWire().take(b) == Request(1, 0x03, h("00 01") + bytes(254))
    assert b == b""


def test_dxl_a_wrong_crc_is_garbled_and_the_packet_dropped() -> None:
    wire = DynamixelWire()
    for bad in ("FF FF FD 00 01 03 00 01 19 4F", "FF FF FD 00 01 03 00 01 18 4E", "FF FF FD 00 02 03 00 01 19 4E"):
        b = buf(bad + " FF FF FD 00 01 03 00 01 19 4E")
        assert wire.take(b) == GARBLED, bad
        assert b == h("FF FF FD 00 01 03 00 01 19 4E"), bad


def test_dxl_status_packets() -> None:
    wire = DynamixelWire()
    # the e-manual's ping and read status examples
    assert wire.status(1, 0, h("06 04 26")) == h("FF FF FD 00 01 07 00 55 00 06 04 26 65 5D")
    assert wire.status(1, 0, h("A6 00 00 00")) == h("FF FF FD 00 01 08 00 55 00 A6 00 00 00 8C C0")
    # an alert with no parameters (dynamixel_sdk: CRC 0x8F2A)
    assert wire.status(2, 0x80, b"") == h("FF FF FD 00 02 04 00 55 80 2A 8F")
    # parameters that need stuffing: the length counts the stuffed byte (dynamixel_sdk: CRC 0xB859)
    assert wire.status(3, 0, h("FF FF FD")) == h("FF FF FD 00 03 08 00 55 00 FF FF FD FD 59 B8")


def test_dxl_status_length_past_one_byte() -> None:
    packet = DynamixelWire().status(1, 0, bytes(300))
    # 0x55, error, 300 parameters, 2 CRC bytes: 304 = 0x0130
    assert packet[:9] == h("FF FF FD 00 01 30 01 55 00")
    assert len(packet) == 7 + 304


def test_dxl_wire_constants() -> None:
    wire = DynamixelWire()
    assert (wire.name, wire.broadcast_id, wire.address_size) == ("dynamixel", 0xFE, 2)


# ---- control-table fields ----------------------------------------------------------------


def test_feetech_sign_magnitude_fields() -> None:
    offset = memory.Field(31, 2, direction_bit=11)
    assert offset.pack(5) == h("05 00")
    assert offset.pack(-5) == h("05 08")
    assert offset.pack(0) == h("00 00")
    assert offset.pack(-2047) == h("FF 0F")
    velocity = memory.Field(58, 2, direction_bit=15)
    assert velocity.pack(-3000) == h("B8 8B")
    mem = bytearray(range(256))
    mem[31:33] = h("05 08")
    assert offset.unpack(mem) == -5
    mem[31:33] = h("05 00")
    assert offset.unpack(mem) == 5
    mem[31:33] = h("FF 0F")
    assert offset.unpack(mem) == -2047
    mem[31:33] = h("FF 07")
    assert offset.unpack(mem) == 2047
    mem[58:60] = h("B8 8B")
    assert velocity.unpack(mem) == -3000


def test_dynamixel_twos_complement_fields() -> None:
    goal = memory.Field(116, 4, signed=True)
    assert goal.pack(-1) == h("FF FF FF FF")
    assert goal.pack(-2) == h("FE FF FF FF")
    assert goal.pack(2**31 - 1) == h("FF FF FF 7F")
    assert goal.pack(-(2**31)) == h("00 00 00 80")
    current = memory.Field(126, 2, signed=True)
    assert current.pack(-300) == h("D4 FE")
    mem = bytearray(range(256))
    for raw, value in (
        ("FF FF FF FF", -1),
        ("00 00 00 80", -(2**31)),
        ("FF FF FF 7F", 2**31 - 1),
        ("00 08 00 00", 2048),
    ):
        mem[116:120] = h(raw)
        assert goal.unpack(mem) == value, raw
    mem[126:128] = h("D4 FE")
    assert current.unpack(mem) == -300
    mem[126:128] = h("FF 7F")
    assert current.unpack(mem) == 32767


def test_unsigned_fields_read_only_their_own_bytes() -> None:
    position = memory.Field(56, 2)
    assert position.pack(4095) == h("FF 0F")
    assert memory.Field(63, 1).pack(31) == h("1F")
    mem = bytearray(b"\xaa" * 256)
    mem[56:58] = h("00 08")
    assert position.unpack(mem) == 2048
    mem[56:58] = h("FF FF")
    assert position.unpack(mem) == 65535  # neither sign-magnitude nor two's complement
    assert memory.Field(5, 1).unpack(bytes(range(10))) == 5


# ---- per-vendor parameter layouts ----------------------------------------------------------


def test_feetech_parameters_are_one_byte_addresses_and_lengths() -> None:
    assert FEETECH.split_read(h("38 02")) == (56, 2)
    assert FEETECH.split_write(h("2A 00 08")) == (42, h("00 08"))
    assert FEETECH.split_sync_read(h("38 02 01 02 03")) == (56, 2, h("01 02 03"))
    assert FEETECH.split_sync_write(h("2A 02 01 00 08 02 FF 07")) == (42, [(1, h("00 08")), (2, h("FF 07"))])


def test_dynamixel_parameters_are_two_byte_little_endian_addresses_and_lengths() -> None:
    assert DYNAMIXEL.split_read(h("84 00 04 00")) == (132, 4)
    assert DYNAMIXEL.split_read(h("02 01 01 01")) == (0x0102, 0x0101)
    assert DYNAMIXEL.split_write(h("74 00 00 02 00 00")) == (116, h("00 02 00 00"))
    assert DYNAMIXEL.split_sync_read(h("84 00 04 00 01 02")) == (132, 4, h("01 02"))
    assert DYNAMIXEL.split_sync_write(h("74 00 04 00 01 96 00 00 00 02 AA 00 00 00")) == (
        116,
        [(1, h("96 00 00 00")), (2, h("AA 00 00 00"))],
    )


def test_a_sync_write_cut_short_writes_only_its_whole_items() -> None:
    # id 2's data is one byte short: only id 1 is written
    assert FEETECH.split_sync_write(h("2A 02 01 00 08 02 FF")) == (42, [(1, h("00 08"))])
    assert FEETECH.split_sync_write(h("2A 02 01 00 08 02")) == (42, [(1, h("00 08"))])
    assert FEETECH.split_sync_write(h("2A 02")) == (42, [])


def test_a_sync_read_without_ids_names_no_servo() -> None:
    assert FEETECH.split_sync_read(h("38 02")) == (56, 2, b"")
    assert DYNAMIXEL.split_sync_read(h("84 00 04 00")) == (132, 4, b"")
