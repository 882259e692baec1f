"""Reading a ``.pte`` without torch: methods, delegates and their payloads, and every refusal.

The programs are built by hand (``tests/bundle/programs.py``): no export, each test well under 0.1 s.
A truncated or altered file is refused naming the file, what was expected and what came, never an
``IndexError`` or ``struct.error``, and never a payload taken from the wrong place.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from runtime.bundle.pte import DelegateInfo, MethodInfo, parse_program, read_program
from runtime.errors import BundleError
from tests.bundle.programs import DELEGATE_CALL, HEADER_LENGTH, KERNEL_CALL, SEGMENT, Delegate, Method, build

FULL = Method()  # one OpenVINO delegate taking inputs 0, 1 and producing 2


def _refused(data: bytes | memoryview, message: str) -> None:
    with pytest.raises(BundleError) as e:
        parse_program(data, "p.pte")
    assert str(e.value) == message


def _corrupt(detail: str) -> str:
    return f"p.pte: corrupt ExecuTorch program: {detail}; re-export the bundle"


def test_a_fully_delegated_method_with_its_inline_payload() -> None:
    methods = parse_program(build([FULL], inline=[b"the blob"]), "p.pte")
    assert methods == {
        "forward": MethodInfo(
            "forward", 2, 1, (DelegateInfo("OpenvinoBackend", {"device": b"CPU"}, b"the blob"),), (), True
        )
    }
    assert methods["forward"].delegates[0].device == "CPU"


def test_each_delegate_takes_its_own_inline_data_and_segment() -> None:
    method = Method(
        delegates=[
            Delegate(index=1),
            Delegate("Other", {"device": b"GPU", "k": b"\x00\x01"}, SEGMENT, 1),
            Delegate(index=0),
            Delegate(location=SEGMENT, index=0),
        ],
        instructions=[(DELEGATE_CALL, i, [0, 1, 2]) for i in range(4)],
    )
    data = build([method], inline=[b"inline zero", b"inline one"], segments=[b"segment zero", b"segment one!"])
    (info,) = parse_program(data, "p.pte").values()
    assert [bytes(d.payload) for d in info.delegates] == [
        b"inline one",
        b"segment one!",
        b"inline zero",
        b"segment zero",
    ]
    assert info.delegates[1] == DelegateInfo("Other", {"device": b"GPU", "k": b"\x00\x01"}, b"segment one!")
    assert [d.device for d in info.delegates] == ["CPU", "GPU", "CPU", "CPU"]
    assert not info.single_delegate


def test_a_segment_is_read_from_the_segment_base_and_offset() -> None:
    data = build([Method(delegates=[Delegate(location=SEGMENT, index=1)])], segments=[b"x" * 40, b"second"])
    base = struct.unpack_from("<Q", data, 24)[0]
    assert data[base + 48 : base + 54] == b"second"  # 40 rounded up to 16
    assert parse_program(data)["forward"].delegates[0].payload == b"second"


def test_payloads_parsed_from_a_memoryview_are_views_not_copies() -> None:
    data = build([Method(delegates=[Delegate(location=SEGMENT, index=0)])], segments=[b"segment payload"])
    payload = parse_program(memoryview(data))["forward"].delegates[0].payload
    assert isinstance(payload, memoryview) and payload.obj is data
    assert bytes(payload) == b"segment payload"


def test_device_of_a_delegate_without_one_is_empty_and_bad_bytes_are_replaced() -> None:
    assert DelegateInfo("b", {}, b"").device == ""
    assert DelegateInfo("b", {"device": b"G\xffU"}, b"").device == "G\ufffdU"


def test_every_method_by_name_with_its_input_and_output_counts() -> None:
    methods = parse_program(
        build([FULL, Method("encode", inputs=[0], outputs=[1, 2, 3], instructions=[(DELEGATE_CALL, 0, [0, 1, 2, 3])])])
    )
    assert list(methods) == ["forward", "encode"]
    assert (methods["encode"].num_inputs, methods["encode"].num_outputs) == (1, 3)
    assert methods["encode"].single_delegate


def test_kernel_calls_name_their_operators_in_order_and_other_instructions_their_kind() -> None:
    method = Method(
        operators=["aten::add", "aten::atan2"],
        instructions=[
            (KERNEL_CALL, 1, [0, 1, 2]),
            (DELEGATE_CALL, 0, [0, 1, 2]),
            (KERNEL_CALL, 0, [0]),
            (3, None, []),
            (KERNEL_CALL, None, []),  # a kernel call without its arguments table
            (DELEGATE_CALL, None, []),
        ],
    )
    info = parse_program(build([method]))["forward"]
    assert info.kernel_ops == (
        "aten::atan2",
        "aten::add",
        "<instruction kind 3>",
        "<instruction kind 1>",
        "<instruction kind 2>",
    )
    assert not info.single_delegate


@pytest.mark.parametrize(
    "method",
    [
        Method(instructions=[(DELEGATE_CALL, 0, [0, 1, 2]), (DELEGATE_CALL, 0, [0, 1, 2])]),  # called twice
        Method(instructions=[]),  # never called
        Method(delegates=[Delegate(), Delegate()]),  # a second delegate
        Method(instructions=[(DELEGATE_CALL, 0, [0, 1])]),  # not producing the output
        Method(instructions=[(DELEGATE_CALL, 0, [1, 0, 2])]),  # inputs in another order
        Method(instructions=[(DELEGATE_CALL, 0, [0, 1, 2, 3])]),  # a value more
        Method(operators=["aten::add"], instructions=[(DELEGATE_CALL, 0, [0, 1, 2]), (KERNEL_CALL, 0, [])]),
        Method(instructions=[(DELEGATE_CALL, 0, [0, 1, 2]), (5, None, [])]),
    ],
    ids=["twice", "never", "two-delegates", "no-output", "reordered", "extra-value", "kernel", "other-instruction"],
)
def test_a_method_is_single_delegate_only_as_one_call_of_its_one_delegate_on_every_value(method: Method) -> None:
    assert not parse_program(build([method]))["forward"].single_delegate


def test_read_program_reads_the_file(tmp_path: Path) -> None:
    (tmp_path / "p.pte").write_bytes(build([FULL], inline=[b"from disk"]))
    assert read_program(tmp_path / "p.pte")["forward"].delegates[0].payload == b"from disk"
    assert read_program(str(tmp_path / "p.pte"))["forward"].single_delegate


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as e:
        read_program(tmp_path / "gone.pte")
    assert str(e.value) == f"{tmp_path / 'gone.pte'}: program file does not exist"


def test_a_file_read_from_disk_is_named_in_its_refusal(tmp_path: Path) -> None:
    data = build([FULL])
    (tmp_path / "p.pte").write_bytes(data[:40])
    with pytest.raises(BundleError) as e:
        read_program(tmp_path / "p.pte")
    assert str(e.value).startswith(f"{tmp_path / 'p.pte'}: corrupt ExecuTorch program: ")


@pytest.mark.parametrize(
    ("data", "got"),
    [
        (b"", b""),
        (b"\x00\x00\x00\x00ET1", b"\x00\x00\x00\x00ET1"),
        (b"\x00\x00\x00\x00ET13", b"ET13"),
        (b"\x00" * 4 + b"ET13" + b"\x00" * 56, b"ET13"),
        (b"PK\x03\x04" * 16, b"PK\x03\x04"),
    ],
    ids=["empty", "seven-bytes", "eight-bytes", "other-identifier", "a-zip"],
)
def test_not_a_program(data: bytes, got: bytes) -> None:
    _refused(data, f"p.pte: not an ExecuTorch program: expected file identifier b'ET12' at byte 4, got {got!r}")


def test_the_default_name_in_a_refusal() -> None:
    with pytest.raises(BundleError) as e:
        parse_program(b"")
    assert str(e.value) == "<program>: not an ExecuTorch program: expected file identifier b'ET12' at byte 4, got b''"


def test_a_program_cut_short_of_the_size_its_header_gives_is_refused() -> None:
    data = build([FULL], segments=[b"payload"])
    program_size = struct.unpack_from("<Q", data, 16)[0]
    _refused(
        data[: program_size - 1],
        _corrupt(
            f"the extended header gives a program of {program_size} bytes, but the file has {program_size - 1} bytes; "
            "it is truncated"
        ),
    )
    parse_program(data[:program_size] + data[program_size:])  # exactly its size is whole


def test_segment_data_cut_short_is_refused_with_where_it_ends() -> None:
    data = build([Method(delegates=[Delegate(location=SEGMENT)])], segments=[b"0123456789"])
    base = struct.unpack_from("<Q", data, 24)[0]
    assert len(data) == base + 10
    _refused(
        data[:-1],
        _corrupt(
            f"the extended header gives segment data of 10 bytes at byte {base}, ending at byte {base + 10}, "
            f"but the file has {base + 9} bytes; it is truncated"
        ),
    )


def test_a_segment_past_the_end_of_the_file_is_refused_even_with_a_24_byte_header() -> None:
    data = bytearray(build([Method(delegates=[Delegate(location=SEGMENT)])], segments=[b"0123456789"]))
    struct.pack_into("<I", data, 12, 24)  # an older header: no segment data size
    base = struct.unpack_from("<Q", data, 24)[0]
    _refused(
        bytes(data[:-1]),
        _corrupt(
            f"method 'forward': delegate segment 0 ends at byte {base + 10}, past the end of the file "
            f"({base + 9} bytes); it is truncated"
        ),
    )
    assert parse_program(bytes(data))["forward"].delegates[0].payload == b"0123456789"


def test_an_extended_header_shorter_than_its_fields_is_refused() -> None:
    data = bytearray(build([FULL], segments=[b"x"]))
    struct.pack_into("<I", data, 12, 23)
    _refused(bytes(data), _corrupt("extended header length at byte 12 is 23, expected at least 24"))


def test_a_program_without_the_header_cut_short_is_refused_naming_the_byte_it_needed() -> None:
    data = build([FULL], inline=[b"an inline payload of some length"])
    whole = parse_program(data)
    assert whole["forward"].delegates[0].payload == b"an inline payload of some length"
    assert data.endswith(struct.pack("<3i", 2, 0, 1))  # the first method's inputs end the flatbuffer
    for n in range(32, len(data)):
        with pytest.raises(BundleError) as e:
            parse_program(data[:n], "p.pte")
        message = str(e.value)
        assert message.startswith("p.pte: corrupt ExecuTorch program: "), message
        assert f"the file has {n} bytes" in message or f"past the end of the file ({n} bytes)" in message, message


def test_an_inline_payload_cut_short_is_refused_not_returned_short() -> None:
    payload = b"P" * 64
    data = build([FULL], inline=[payload])
    at = data.index(payload)
    _refused(
        data[: at + 63],
        _corrupt(f"expected 64 bytes at byte {at}, but the file has {at + 63} bytes; it is truncated or corrupt"),
    )


def test_a_string_cut_short_is_refused_not_returned_short() -> None:
    data = build([Method(name="a-long-method-name")], inline=[])
    at = data.index(b"a-long-method-name")
    _refused(
        data[: at + 5],
        _corrupt(f"expected 18 bytes at byte {at}, but the file has {at + 5} bytes; it is truncated or corrupt"),
    )


@pytest.mark.parametrize("size", [8, 31])
def test_a_file_with_the_identifier_but_shorter_than_the_header_is_refused(size: int) -> None:
    _refused(
        build([FULL])[:size],
        _corrupt(f"expected at least 32 bytes, but the file has {size} bytes; it is truncated"),
    )


def test_an_offset_pointing_past_the_end_is_refused() -> None:
    data = bytearray(build([FULL]))
    struct.pack_into("<I", data, 0, len(data))
    _refused(
        bytes(data),
        _corrupt(f"the offset at byte 0 points to byte {len(data)}, past the end of the file ({len(data)} bytes)"),
    )
    struct.pack_into("<I", data, 0, 0xFFFFFFFF)
    _refused(
        bytes(data),
        _corrupt(f"the offset at byte 0 points to byte {0xFFFFFFFF}, past the end of the file ({len(data)} bytes)"),
    )


def test_a_vtable_before_the_start_of_the_file_is_refused() -> None:
    data = bytearray(build([FULL]))
    root = struct.unpack_from("<I", data, 0)[0]
    struct.pack_into("<i", data, root, root + 1)  # the vtable at byte -1
    _refused(
        bytes(data),
        _corrupt(f"expected 2 bytes at byte -1, but the file has {len(data)} bytes; it is truncated or corrupt"),
    )


def test_a_segment_payload_without_the_extended_header_is_refused() -> None:
    data = build([Method(delegates=[Delegate(location=SEGMENT, index=0)])], segments=[b"x"], extended_header=False)
    _refused(
        data,
        _corrupt(
            "method 'forward': delegate 0's payload is in segment 0, but the file has no extended header "
            "(b'eh00' at byte 8) giving where segments start"
        ),
    )


def test_a_segment_index_past_the_segments_is_refused() -> None:
    method = Method(delegates=[Delegate(location=SEGMENT, index=0), Delegate(location=SEGMENT, index=2)])
    _refused(
        build([method], segments=[b"a", b"b"]),
        _corrupt("method 'forward': delegate 1's segment 2 is out of range: the program has 2"),
    )


def test_an_inline_index_past_the_inline_data_is_refused() -> None:
    _refused(
        build([Method(delegates=[Delegate(index=1)])], inline=[b"only one"]),
        _corrupt("method 'forward': delegate 0's inline data 1 is out of range: the program has 1"),
    )


def test_a_delegate_without_a_payload_is_refused() -> None:
    _refused(
        build([Method(delegates=[Delegate(), Delegate(location=None)])]),
        _corrupt("method 'forward': delegate 1 has no processed payload"),
    )


@pytest.mark.parametrize("index", [-1, 2])
def test_a_kernel_call_to_an_operator_out_of_range_is_refused(index: int) -> None:
    method = Method(operators=["aten::add", "aten::mul"], instructions=[(KERNEL_CALL, index, [])])
    _refused(
        build([method]),
        _corrupt(f"method 'forward': kernel call's operator {index} is out of range: the program has 2"),
    )


@pytest.mark.parametrize("index", [-1, 1])
def test_a_delegate_call_to_a_delegate_out_of_range_is_refused(index: int) -> None:
    _refused(
        build([Method(instructions=[(DELEGATE_CALL, index, [0, 1, 2])])]),
        _corrupt(f"method 'forward': delegate call's delegate {index} is out of range: the program has 1"),
    )


def test_the_last_operator_and_delegate_are_in_range() -> None:
    method = Method(
        operators=["aten::add", "aten::mul"],
        delegates=[Delegate(), Delegate()],
        instructions=[(KERNEL_CALL, 1, []), (DELEGATE_CALL, 1, [])],
    )
    assert parse_program(build([method]))["forward"].kernel_ops == ("aten::mul",)


def test_a_name_that_is_not_utf8_is_refused() -> None:
    data = bytearray(build([Method(name="forwarx")]))
    data[data.index(b"forwarx") + 6] = 0xFF
    with pytest.raises(BundleError) as e:
        parse_program(bytes(data), "p.pte")
    assert str(e.value).startswith("p.pte: corrupt ExecuTorch program: a name is not UTF-8 ('utf-8' codec can't decode")
    assert str(e.value).endswith("); re-export the bundle")


def test_the_header_length_used_here_is_executorchs() -> None:
    # executorch 0.6+ writes a 32-byte extended header (with the segment data size)
    assert HEADER_LENGTH == 32


def test_a_program_whose_last_read_ends_at_the_last_byte_is_whole() -> None:
    data = build([FULL])
    assert data.endswith(struct.pack("<3i", 2, 0, 1))  # the inputs vector: length 2, then 0 and 1
    assert parse_program(data)["forward"].num_inputs == 2


def test_a_32_byte_file_is_read_as_a_program() -> None:
    # 32 bytes pass the length check: the refusal is the first read past them, not the minimum size
    _refused(
        build([FULL])[:32],
        _corrupt("expected 4 bytes at byte 32, but the file has 32 bytes; it is truncated or corrupt"),
    )


def test_absent_vectors_are_empty() -> None:
    method = Method(operators=None, delegates=[], instructions=[(3, None, [])])
    info = parse_program(build([method], inline=[], absent=("backend_delegate_data", "segments")))["forward"]
    assert (info.delegates, info.kernel_ops) == ((), ("<instruction kind 3>",))
    method = Method(delegates=[Delegate(specs=None, location=SEGMENT)])
    info = parse_program(build([method], inline=[], segments=[b"s"], absent=("backend_delegate_data",)))["forward"]
    assert info.delegates == (DelegateInfo("OpenvinoBackend", {}, b"s"),)


def test_a_vector_length_past_the_end_of_the_file_is_refused() -> None:
    data = bytearray(build([FULL]))
    at = len(data) - 12  # the inputs vector's length
    struct.pack_into("<I", data, at, 0xFFFFFFFF)
    _refused(
        bytes(data),
        _corrupt(
            f"expected {4 * 0xFFFFFFFF} bytes at byte {at + 4}, but the file has {len(data)} bytes; "
            "it is truncated or corrupt"
        ),
    )


@pytest.mark.parametrize("entry", [(2**64 - 1, 1), (0, 2**64 - 1), (2**63, 0)])
def test_a_segment_offset_or_size_past_the_end_is_refused(entry: tuple[int, int]) -> None:
    data = build([Method(delegates=[Delegate(location=SEGMENT)])], segments=[b"x"], segment_entries=[entry])
    base = struct.unpack_from("<Q", data, 24)[0]
    offset, size = entry
    _refused(
        data,
        _corrupt(
            f"method 'forward': delegate segment 0 ends at byte {base + offset + size}, past the end of the file "
            f"({len(data)} bytes); it is truncated"
        ),
    )


def test_a_segment_ending_at_the_last_byte_is_whole() -> None:
    data = build([Method(delegates=[Delegate(location=SEGMENT)])], segments=[b"0123"], segment_entries=[(1, 3)])
    assert parse_program(data)["forward"].delegates[0].payload == b"123"


def _header(data: bytes, **fields: int) -> bytes:
    out = bytearray(data)
    for name, value in fields.items():
        fmt, at = {"length": ("<I", 12), "program_size": ("<Q", 16), "base": ("<Q", 24), "segment_data": ("<Q", 32)}[
            name
        ]
        struct.pack_into(fmt, out, at, value)
    return bytes(out)


SEGMENTED = build([Method(delegates=[Delegate(location=SEGMENT)])], segments=[b"0123456789"])


def test_a_header_length_past_the_program_is_refused() -> None:
    size = struct.unpack_from("<Q", SEGMENTED, 16)[0]
    for length in (size - 7, 2**32 - 1):
        _refused(
            _header(SEGMENTED, length=length),
            _corrupt(f"extended header length at byte 12 is {length}, past the end of the program ({size} bytes)"),
        )
    assert parse_program(_header(SEGMENTED, length=size - 8))["forward"].delegates[0].payload == b"0123456789"


def test_a_program_size_past_the_end_is_refused() -> None:
    _refused(
        _header(SEGMENTED, program_size=2**64 - 1),
        _corrupt(
            f"the extended header gives a program of {2**64 - 1} bytes, but the file has {len(SEGMENTED)} bytes; "
            "it is truncated"
        ),
    )


def test_a_program_exactly_its_size_is_whole() -> None:
    data = _header(build([FULL], extended_header=True), length=24)  # no segment data size
    size = struct.unpack_from("<Q", data, 16)[0]
    assert parse_program(data[:size])["forward"].single_delegate


@pytest.mark.parametrize(("base", "segment_data"), [(2**64 - 1, 10), (480, 2**64 - 1)])
def test_segment_data_past_the_end_is_refused(base: int, segment_data: int) -> None:
    _refused(
        _header(SEGMENTED, base=base, segment_data=segment_data),
        _corrupt(
            f"the extended header gives segment data of {segment_data} bytes at byte {base}, ending at byte "
            f"{base + segment_data}, but the file has {len(SEGMENTED)} bytes; it is truncated"
        ),
    )


def test_a_segment_base_inside_the_program_is_refused() -> None:
    size = struct.unpack_from("<Q", SEGMENTED, 16)[0]
    _refused(
        _header(SEGMENTED, base=size - 1, segment_data=0),
        _corrupt(f"the extended header gives segment base offset {size - 1}, inside the program ({size} bytes)"),
    )
    at_size = _header(SEGMENTED, base=size, segment_data=0)
    assert parse_program(at_size)["forward"].delegates[0].payload == SEGMENTED[size : size + 10]


def test_a_segment_index_past_32_bits_signed_is_named_as_written() -> None:
    _refused(
        build([Method(delegates=[Delegate(location=SEGMENT, index=2**32 - 1)])], segments=[b"a"]),
        _corrupt(f"method 'forward': delegate 0's segment {2**32 - 1} is out of range: the program has 1"),
    )


@pytest.mark.parametrize("location", [2, -1])
def test_an_unknown_payload_location_is_refused(location: int) -> None:
    _refused(
        build([Method(delegates=[Delegate(location=location)])]),
        _corrupt(f"method 'forward': delegate 0's payload location is {location}, expected 0 (inline) or 1 (segment)"),
    )


def test_an_instruction_kind_is_named_unsigned() -> None:
    info = parse_program(build([Method(instructions=[(200, None, [])])]))["forward"]
    assert info.kernel_ops == ("<instruction kind 200>",)


def test_a_vector_whose_entries_share_one_table_is_read_to_its_last_entry() -> None:
    # 60 entries, 4 bytes each, pointing at one table: fewer bytes follow the vector than it has entries
    method = Method(operators=["aten::add"] * 60, delegates=[], inputs=[], instructions=[(KERNEL_CALL, 59, [])])
    data = build([method], inline=[])
    at = data.index(struct.pack("<I", 60)) + 4
    assert len(data) - (at + 4 * 60) < 60
    assert parse_program(data)["forward"].kernel_ops == ("aten::add",)
