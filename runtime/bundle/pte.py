"""Read an ExecuTorch ``.pte`` program without torch or executorch.

A ``.pte`` is a flatbuffer (schema ``program.fbs`` in the executorch package, file identifier ``ET12``)
followed by data segments. An extended header (magic ``eh00``) sits at byte 8: u32 header length,
u64 program size, u64 segment base offset, and from a length of 32 on a u64 segment data size. A
delegate's ``processed`` payload lives either inline in ``Program.backend_delegate_data`` or in
``Program.segments[i]`` at ``segment_base + offset``.

Only the handful of fields the runtime needs are read, each read checked against the file's length
(a truncated or corrupt file is refused naming the byte it needed, never an ``IndexError``), and every
index into another table checked against that table's length (a negative one too: Python would take
it from the end). ``flatbuffers``' ``Table`` holds the position; vtable slots follow the field order
of ``program.fbs`` (a union takes two slots: its type, then its value).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from flatbuffers.table import Table

from runtime.errors import BundleError

FILE_IDENTIFIER = b"ET12"
EXTENDED_HEADER_MAGIC = b"eh00"
OPENVINO_BACKEND_ID = "OpenvinoBackend"

# vtable offsets (4 + 2 * field index) from program.fbs
_PROGRAM_EXECUTION_PLAN = 6
_PROGRAM_BACKEND_DELEGATE_DATA = 10
_PROGRAM_SEGMENTS = 12
_PLAN_NAME = 4
_PLAN_INPUTS = 10
_PLAN_OUTPUTS = 12
_PLAN_CHAINS = 14
_PLAN_OPERATORS = 16
_PLAN_DELEGATES = 18
_CHAIN_INSTRUCTIONS = 8
_INSTRUCTION_ARGS_TYPE = 4
_INSTRUCTION_ARGS = 6
_DELEGATE_CALL_INDEX = 4
_DELEGATE_CALL_ARGS = 6
_KERNEL_CALL_OP_INDEX = 4
_OPERATOR_NAME = 4
_BACKEND_DELEGATE_ID = 4
_BACKEND_DELEGATE_PROCESSED = 6
_BACKEND_DELEGATE_COMPILE_SPECS = 8
_COMPILE_SPEC_KEY = 4
_COMPILE_SPEC_VALUE = 6
_DATA_REF_LOCATION = 4
_DATA_REF_INDEX = 6
_INLINE_DATA = 4
_SEGMENT_OFFSET = 4
_SEGMENT_SIZE = 6

_UNION_KERNEL_CALL = 1
_UNION_DELEGATE_CALL = 2
_LOCATION_INLINE = 0
_LOCATION_SEGMENT = 1
# the extended header: magic, u32 length, u64 program size, u64 segment base offset (24 bytes); from
# 32 bytes on, a u64 segment data size follows
_HEADER_MIN_LENGTH = 24
_MIN_PROGRAM = 32  # the root offset, the identifier and a 24-byte extended header
_HEADER_SEGMENT_DATA_LENGTH = 32

_T = TypeVar("_T")


@dataclass(frozen=True)
class DelegateInfo:
    backend_id: str
    compile_specs: dict[str, bytes]
    payload: bytes | memoryview  # a view into the program when it was parsed from a memoryview

    @property
    def device(self) -> str:
        return self.compile_specs.get("device", b"").decode(errors="replace")


@dataclass(frozen=True)
class MethodInfo:
    name: str
    num_inputs: int
    num_outputs: int
    delegates: tuple[DelegateInfo, ...]
    kernel_ops: tuple[str, ...]  # operators left on ExecuTorch's own kernels
    # True when the method is one delegate call taking every input and producing every output.
    single_delegate: bool


class _Malformed(ValueError):
    """A read the program's bytes cannot satisfy; parse_program names the file."""


def _read(data: bytes | memoryview, fmt: str, pos: int) -> int:
    size = struct.calcsize(fmt)
    if pos < 0 or pos + size > len(data):
        raise _Malformed(
            f"expected {size} bytes at byte {pos}, but the file has {len(data)} bytes; it is truncated or corrupt"
        )
    return int(struct.unpack_from(fmt, data, pos)[0])


def _span(data: bytes | memoryview, start: int, size: int) -> None:
    if start + size > len(data):
        raise _Malformed(
            f"expected {size} bytes at byte {start}, but the file has {len(data)} bytes; it is truncated or corrupt"
        )


def _field(t: Table, slot: int) -> int:
    vtable = t.Pos - _read(t.Bytes, "<i", t.Pos)
    if slot < _read(t.Bytes, "<H", vtable):
        return _read(t.Bytes, "<H", vtable + slot)
    return 0


def _at(data: bytes | memoryview, pos: int) -> Table:
    """The table (or vector) the offset stored at ``pos`` points to."""
    target = pos + _read(data, "<I", pos)
    if target >= len(data):
        raise _Malformed(
            f"the offset at byte {pos} points to byte {target}, past the end of the file ({len(data)} bytes)"
        )
    return Table(data, target)


def _vector(t: Table, slot: int) -> tuple[int, int]:
    o = _field(t, slot)
    if not o:
        return 0, 0
    head = _at(t.Bytes, t.Pos + o).Pos
    return head + 4, _read(t.Bytes, "<I", head)


def _table_at(t: Table, slot: int) -> Table | None:
    o = _field(t, slot)
    if not o:
        return None
    return _at(t.Bytes, t.Pos + o)


def _vector_tables(t: Table, slot: int) -> list[Table]:
    start, n = _vector(t, slot)
    _span(t.Bytes, start, 4 * n)
    return [_at(t.Bytes, start + 4 * i) for i in range(n)]


def _bytes(t: Table, slot: int) -> bytes:
    start, n = _vector(t, slot)
    _span(t.Bytes, start, n)
    return bytes(t.Bytes[start : start + n])


def _string(t: Table, slot: int) -> str:
    return _bytes(t, slot).decode()


def _ints(t: Table, slot: int) -> list[int]:
    start, n = _vector(t, slot)
    _span(t.Bytes, start, 4 * n)
    return [_read(t.Bytes, "<i", start + 4 * i) for i in range(n)]


def _scalar(t: Table, slot: int, fmt: str) -> int:
    o = _field(t, slot)
    return _read(t.Bytes, fmt, t.Pos + o) if o else 0


def _entry(items: list[_T], index: int, what: str) -> _T:
    if not 0 <= index < len(items):
        raise _Malformed(f"{what} {index} is out of range: the program has {len(items)}")
    return items[index]


def read_program(path: str | Path) -> dict[str, MethodInfo]:
    """Return every method of the program with its delegates (payloads included) and leftover kernels."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError as e:
        raise BundleError(f"{p}: program file does not exist") from e
    return parse_program(data, str(p))


def parse_program(data: bytes | memoryview, name: str = "<program>") -> dict[str, MethodInfo]:
    """Parse a program held in memory; from a memoryview (an mmap) delegate payloads are not copied."""
    if data[4:8] != FILE_IDENTIFIER:
        got = data[4:8] if len(data) >= 8 else data
        raise BundleError(
            f"{name}: not an ExecuTorch program: expected file identifier {FILE_IDENTIFIER!r} at byte 4, "
            f"got {bytes(got)!r}"
        )
    if len(data) < _MIN_PROGRAM:
        raise BundleError(
            f"{name}: corrupt ExecuTorch program: expected at least {_MIN_PROGRAM} bytes, but the file has "
            f"{len(data)} bytes; it is truncated; re-export the bundle"
        )
    try:
        header = _extended_header(data)
        root = _at(data, 0)
        inline = [_bytes(t, _INLINE_DATA) for t in _vector_tables(root, _PROGRAM_BACKEND_DELEGATE_DATA)]
        segments = [
            (_scalar(t, _SEGMENT_OFFSET, "<Q"), _scalar(t, _SEGMENT_SIZE, "<Q"))
            for t in _vector_tables(root, _PROGRAM_SEGMENTS)
        ]
        methods: dict[str, MethodInfo] = {}
        for plan in _vector_tables(root, _PROGRAM_EXECUTION_PLAN):
            methods_name = _string(plan, _PLAN_NAME)
            methods[methods_name] = _method(plan, methods_name, data, inline, segments, header)
    except _Malformed as e:
        raise BundleError(f"{name}: corrupt ExecuTorch program: {e}; re-export the bundle") from None
    except UnicodeDecodeError as e:
        raise BundleError(f"{name}: corrupt ExecuTorch program: a name is not UTF-8 ({e}); re-export the bundle") from e
    return methods


def _extended_header(data: bytes | memoryview) -> tuple[int, int] | None:
    """The segment base offset and program size the extended header gives, None without the header."""
    if data[8:12] != EXTENDED_HEADER_MAGIC:
        return None
    length, program_size, segment_base = (_read(data, fmt, at) for fmt, at in (("<I", 12), ("<Q", 16), ("<Q", 24)))
    if length < _HEADER_MIN_LENGTH:
        raise _Malformed(f"extended header length at byte 12 is {length}, expected at least {_HEADER_MIN_LENGTH}")
    if program_size > len(data):
        raise _Malformed(
            f"the extended header gives a program of {program_size} bytes, but the file has {len(data)} bytes; "
            "it is truncated"
        )
    if 8 + length > program_size:
        raise _Malformed(
            f"extended header length at byte 12 is {length}, past the end of the program ({program_size} bytes)"
        )
    if length >= _HEADER_SEGMENT_DATA_LENGTH:
        segment_data = _read(data, "<Q", 32)
        if segment_base + segment_data > len(data):
            raise _Malformed(
                f"the extended header gives segment data of {segment_data} bytes at byte {segment_base}, "
                f"ending at byte {segment_base + segment_data}, but the file has {len(data)} bytes; it is truncated"
            )
    return segment_base, program_size


def _method(
    plan: Table,
    method: str,
    data: bytes | memoryview,
    inline: list[bytes],
    segments: list[tuple[int, int]],
    header: tuple[int, int] | None,
) -> MethodInfo:
    delegates: list[DelegateInfo] = []
    for d in _vector_tables(plan, _PLAN_DELEGATES):
        specs = {
            _string(cs, _COMPILE_SPEC_KEY): _bytes(cs, _COMPILE_SPEC_VALUE)
            for cs in _vector_tables(d, _BACKEND_DELEGATE_COMPILE_SPECS)
        }
        ref = _table_at(d, _BACKEND_DELEGATE_PROCESSED)
        if ref is None:
            raise _Malformed(f"method {method!r}: delegate {len(delegates)} has no processed payload")
        index = _scalar(ref, _DATA_REF_INDEX, "<I")
        location = _scalar(ref, _DATA_REF_LOCATION, "<b")
        if location not in (_LOCATION_INLINE, _LOCATION_SEGMENT):
            raise _Malformed(
                f"method {method!r}: delegate {len(delegates)}'s payload location is {location}, "
                f"expected {_LOCATION_INLINE} (inline) or {_LOCATION_SEGMENT} (segment)"
            )
        if location == _LOCATION_SEGMENT:
            if header is None:
                raise _Malformed(
                    f"method {method!r}: delegate {len(delegates)}'s payload is in segment {index}, but the file has "
                    f"no extended header ({EXTENDED_HEADER_MAGIC!r} at byte 8) giving where segments start"
                )
            segment_base, program_size = header
            if segment_base < program_size:
                raise _Malformed(
                    f"the extended header gives segment base offset {segment_base}, inside the program "
                    f"({program_size} bytes)"
                )
            offset, size = _entry(segments, index, f"method {method!r}: delegate {len(delegates)}'s segment")
            start = segment_base + offset
            if start + size > len(data):
                raise _Malformed(
                    f"method {method!r}: delegate segment {index} ends at byte {start + size}, "
                    f"past the end of the file ({len(data)} bytes); it is truncated"
                )
            payload: bytes | memoryview = data[start : start + size]
        else:
            payload = _entry(inline, index, f"method {method!r}: delegate {len(delegates)}'s inline data")
        delegates.append(DelegateInfo(_string(d, _BACKEND_DELEGATE_ID), specs, payload))

    operators = [_string(op, _OPERATOR_NAME) for op in _vector_tables(plan, _PLAN_OPERATORS)]
    inputs = _ints(plan, _PLAN_INPUTS)
    outputs = _ints(plan, _PLAN_OUTPUTS)
    kernel_ops: list[str] = []
    delegate_calls: list[tuple[int, list[int]]] = []
    for chain in _vector_tables(plan, _PLAN_CHAINS):
        for ins in _vector_tables(chain, _CHAIN_INSTRUCTIONS):
            kind = _scalar(ins, _INSTRUCTION_ARGS_TYPE, "<B")
            args = _table_at(ins, _INSTRUCTION_ARGS)
            if kind == _UNION_DELEGATE_CALL and args is not None:
                index = _scalar(args, _DELEGATE_CALL_INDEX, "<i")
                _entry(delegates, index, f"method {method!r}: delegate call's delegate")
                delegate_calls.append((index, _ints(args, _DELEGATE_CALL_ARGS)))
            elif kind == _UNION_KERNEL_CALL and args is not None:
                op = _scalar(args, _KERNEL_CALL_OP_INDEX, "<i")
                kernel_ops.append(_entry(operators, op, f"method {method!r}: kernel call's operator"))
            else:
                kernel_ops.append(f"<instruction kind {kind}>")
    single = (
        not kernel_ops
        and len(delegate_calls) == 1
        and len(delegates) == 1
        # a delegate call's args are its inputs followed by its outputs, as value indices
        and delegate_calls[0][1] == inputs + outputs
    )
    return MethodInfo(method, len(inputs), len(outputs), tuple(delegates), tuple(kernel_ops), single)
