"""Read an ExecuTorch ``.pte`` program without torch or executorch.

A ``.pte`` is a flatbuffer (schema ``program.fbs`` in the executorch package, file identifier ``ET12``)
followed by data segments. An extended header (magic ``eh00``) sits at byte 8: u32 header length,
u64 program size, u64 segment base offset. A delegate's ``processed`` payload lives either inline in
``Program.backend_delegate_data`` or in ``Program.segments[i]`` at ``segment_base + offset``.

Only the handful of fields the runtime needs are read, through the ``flatbuffers`` package's table
accessor; vtable slots follow the field order of ``program.fbs`` (a union takes two slots: its type,
then its value).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

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
_LOCATION_SEGMENT = 1


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


def _field(t: Table, slot: int) -> int:
    return int(t.Offset(slot))


def _vector(t: Table, slot: int) -> tuple[int, int]:
    o = _field(t, slot)
    if not o:
        return 0, 0
    return t.Vector(o), t.VectorLen(o)


def _table_at(t: Table, slot: int) -> Table | None:
    o = _field(t, slot)
    if not o:
        return None
    return Table(t.Bytes, t.Indirect(o + t.Pos))


def _vector_tables(t: Table, slot: int) -> list[Table]:
    start, n = _vector(t, slot)
    return [Table(t.Bytes, t.Indirect(start + 4 * i)) for i in range(n)]


def _string(t: Table, slot: int) -> str:
    o = _field(t, slot)
    return t.String(o + t.Pos).decode() if o else ""


def _bytes(t: Table, slot: int) -> bytes:
    start, n = _vector(t, slot)
    return bytes(t.Bytes[start : start + n])


def _ints(t: Table, slot: int, fmt: str = "<i") -> list[int]:
    start, n = _vector(t, slot)
    size = struct.calcsize(fmt)
    return [struct.unpack_from(fmt, t.Bytes, start + size * i)[0] for i in range(n)]


def _scalar(t: Table, slot: int, fmt: str, default: int = 0) -> int:
    o = _field(t, slot)
    return int(struct.unpack_from(fmt, t.Bytes, t.Pos + o)[0]) if o else default


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
    if len(data) < 32 or data[4:8] != FILE_IDENTIFIER:
        got = data[4:8] if len(data) >= 8 else data
        raise BundleError(
            f"{name}: not an ExecuTorch program: expected file identifier {FILE_IDENTIFIER!r} at byte 4, "
            f"got {bytes(got)!r}"
        )
    segment_base = 0
    if data[8:12] == EXTENDED_HEADER_MAGIC:
        _hlen, _program_size, segment_base = struct.unpack_from("<IQQ", data, 12)
    try:
        root = Table(data, struct.unpack_from("<I", data, 0)[0])
        inline = [_bytes(t, _INLINE_DATA) for t in _vector_tables(root, _PROGRAM_BACKEND_DELEGATE_DATA)]
        segments = [
            (_scalar(t, _SEGMENT_OFFSET, "<Q"), _scalar(t, _SEGMENT_SIZE, "<Q"))
            for t in _vector_tables(root, _PROGRAM_SEGMENTS)
        ]
        methods: dict[str, MethodInfo] = {}
        for plan in _vector_tables(root, _PROGRAM_EXECUTION_PLAN):
            methods_name = _string(plan, _PLAN_NAME)
            methods[methods_name] = _method(plan, methods_name, data, inline, segments, segment_base, name)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise BundleError(f"{name}: corrupt ExecuTorch program ({e}); re-export the bundle") from e
    return methods


def _method(
    plan: Table,
    method: str,
    data: bytes | memoryview,
    inline: list[bytes],
    segments: list[tuple[int, int]],
    segment_base: int,
    name: str,
) -> MethodInfo:
    delegates: list[DelegateInfo] = []
    for d in _vector_tables(plan, _PLAN_DELEGATES):
        specs = {
            _string(cs, _COMPILE_SPEC_KEY): _bytes(cs, _COMPILE_SPEC_VALUE)
            for cs in _vector_tables(d, _BACKEND_DELEGATE_COMPILE_SPECS)
        }
        ref = _table_at(d, _BACKEND_DELEGATE_PROCESSED)
        if ref is None:
            raise BundleError(f"{name}: method {method!r}: delegate has no processed payload")
        index = _scalar(ref, _DATA_REF_INDEX, "<I")
        if _scalar(ref, _DATA_REF_LOCATION, "<b") == _LOCATION_SEGMENT:
            offset, size = segments[index]
            start = segment_base + offset
            if start + size > len(data):
                raise BundleError(
                    f"{name}: method {method!r}: delegate segment {index} ends at byte {start + size}, "
                    f"past the end of the file ({len(data)} bytes); the file is truncated"
                )
            payload = data[start : start + size]
        else:
            payload = inline[index]
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
                delegate_calls.append((_scalar(args, _DELEGATE_CALL_INDEX, "<i"), _ints(args, _DELEGATE_CALL_ARGS)))
            elif kind == _UNION_KERNEL_CALL and args is not None:
                kernel_ops.append(operators[_scalar(args, _KERNEL_CALL_OP_INDEX, "<i")])
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
