"""ExecuTorch ``.pte`` programs built by hand with the ``flatbuffers`` builder (no torch, no export).

Field slots follow ``program.fbs`` (executorch's schema), written out here rather than taken from
``runtime.bundle.pte``: a program these helpers build is what an export writes, whatever the reader
under test thinks the slots are.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import flatbuffers

KERNEL_CALL = 1
DELEGATE_CALL = 2
INLINE = 0
SEGMENT = 1
HEADER_LENGTH = 32  # magic, u32 length, u64 program size, segment base offset, segment data size


@dataclass
class Delegate:
    backend_id: str = "OpenvinoBackend"
    specs: dict[str, bytes] | None = field(default_factory=lambda: {"device": b"CPU"})  # None: no field
    location: int | None = INLINE  # None: no processed payload at all
    index: int = 0


@dataclass
class Method:
    name: str = "forward"
    inputs: list[int] = field(default_factory=lambda: [0, 1])
    outputs: list[int] = field(default_factory=lambda: [2])
    operators: list[str] | None = field(default_factory=list)  # None: no operators field at all
    delegates: list[Delegate] = field(default_factory=lambda: [Delegate()])
    # (kind, index, args): kind 2 a delegate call (index of the delegate), 1 a kernel call (index of
    # the operator), anything else an instruction of that kind; index None leaves the args out.
    instructions: list[tuple[int, int | None, list[int]]] = field(
        default_factory=lambda: [(DELEGATE_CALL, 0, [0, 1, 2])]
    )


def _vector_of_tables(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return int(b.EndVector())


def _ints(b: flatbuffers.Builder, values: list[int]) -> int:
    b.StartVector(4, len(values), 4)
    for v in reversed(values):
        b.PrependInt32(v)
    return int(b.EndVector())


def _delegate(b: flatbuffers.Builder, d: Delegate) -> int:
    specs = []
    for key, value in (d.specs or {}).items():
        k, v = b.CreateString(key), b.CreateByteVector(value)
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, k, 0)
        b.PrependUOffsetTRelativeSlot(1, v, 0)
        specs.append(b.EndObject())
    spec_vector = None if d.specs is None else _vector_of_tables(b, specs)
    backend = b.CreateString(d.backend_id)
    ref = None
    if d.location is not None:
        b.StartObject(2)
        b.PrependInt8Slot(0, d.location, 0)
        b.PrependUint32Slot(1, d.index, 0)
        ref = b.EndObject()
    b.StartObject(3)
    b.PrependUOffsetTRelativeSlot(0, backend, 0)
    if ref is not None:
        b.PrependUOffsetTRelativeSlot(1, ref, 0)
    if spec_vector is not None:
        b.PrependUOffsetTRelativeSlot(2, spec_vector, 0)
    return int(b.EndObject())


def _instruction(b: flatbuffers.Builder, kind: int, index: int | None, args: list[int]) -> int:
    body = None
    if index is not None:
        arg_vector = _ints(b, args)
        b.StartObject(2)
        b.PrependInt32Slot(0, index, -(2**31))  # a default no index takes: 0 is written too
        b.PrependUOffsetTRelativeSlot(1, arg_vector, 0)
        body = b.EndObject()
    b.StartObject(2)
    b.PrependUint8Slot(0, kind, 0)
    if body is not None:
        b.PrependUOffsetTRelativeSlot(1, body, 0)
    return int(b.EndObject())


def _plan(b: flatbuffers.Builder, m: Method) -> int:
    # the inputs first: built back to front, the first method's inputs end the flatbuffer, so its
    # last read ends at the file's last byte
    inputs = _ints(b, m.inputs)
    delegates = _vector_of_tables(b, [_delegate(b, d) for d in m.delegates])
    # one table per operator name, shared by every entry naming it (flatbuffers allows it)
    tables: dict[str, int] = {}
    for op in m.operators or []:
        if op not in tables:
            s = b.CreateString(op)
            b.StartObject(2)
            b.PrependUOffsetTRelativeSlot(0, s, 0)
            tables[op] = b.EndObject()
    ops = [tables[op] for op in m.operators or []]
    operators = None if m.operators is None else _vector_of_tables(b, ops)
    instructions = _vector_of_tables(b, [_instruction(b, *i) for i in m.instructions])
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(2, instructions, 0)
    chains = _vector_of_tables(b, [b.EndObject()])
    outputs, name = _ints(b, m.outputs), b.CreateString(m.name)
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUOffsetTRelativeSlot(3, inputs, 0)
    b.PrependUOffsetTRelativeSlot(4, outputs, 0)
    b.PrependUOffsetTRelativeSlot(5, chains, 0)
    if operators is not None:
        b.PrependUOffsetTRelativeSlot(6, operators, 0)
    b.PrependUOffsetTRelativeSlot(7, delegates, 0)
    return int(b.EndObject())


def build(
    methods: list[Method] | None = None,
    inline: list[bytes] | None = None,
    segments: list[bytes] | None = None,
    extended_header: bool | None = None,
    segment_entries: list[tuple[int, int]] | None = None,
    absent: tuple[str, ...] = (),
) -> bytes:
    """A program: its methods, inline delegate data and segments (each 16-byte aligned after the base).

    The extended header is written when there are segments, unless ``extended_header`` says otherwise.
    ``segment_entries``: the (offset, size) written for each segment instead of the real ones;
    ``absent``: Program fields left out (``"backend_delegate_data"``, ``"segments"``).
    """
    methods = [Method()] if methods is None else methods
    inline = [b"inline payload"] if inline is None else inline
    segments = segments or []
    if extended_header is None:
        extended_header = bool(segments)
    b = flatbuffers.Builder(0)
    plans = _vector_of_tables(b, [_plan(b, m) for m in methods])
    data = []
    for blob in inline:
        v = b.CreateByteVector(blob)
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, v, 0)
        data.append(b.EndObject())
    data_vector = _vector_of_tables(b, data)
    offsets, at = [], 0
    for blob in segments:
        offsets.append((at, len(blob)))
        at += (len(blob) + 15) // 16 * 16
    entries = []
    for offset, size in offsets if segment_entries is None else segment_entries:
        b.StartObject(2)
        b.PrependUint64Slot(0, offset, 0)
        b.PrependUint64Slot(1, size, 0)
        entries.append(b.EndObject())
    segment_vector = _vector_of_tables(b, entries)
    b.StartObject(5)
    b.PrependUint32Slot(0, 0, 0)
    b.PrependUOffsetTRelativeSlot(1, plans, 0)
    if "backend_delegate_data" not in absent:
        b.PrependUOffsetTRelativeSlot(3, data_vector, 0)
    if "segments" not in absent:
        b.PrependUOffsetTRelativeSlot(4, segment_vector, 0)
    b.Finish(b.EndObject(), file_identifier=b"ET12")
    flat = bytes(b.Output())
    if not extended_header:
        return flat
    # The header goes in after the file identifier; every flatbuffer offset is relative to where it
    # is stored but the root's (relative to byte 0), so only the root offset moves.
    program_size = len(flat) + HEADER_LENGTH
    base = (program_size + 15) // 16 * 16
    tail = bytearray()
    for (offset, _), blob in zip(offsets, segments, strict=True):
        tail.extend(b"\0" * (offset - len(tail)))
        tail.extend(blob)
    header = b"eh00" + struct.pack("<IQQQ", HEADER_LENGTH, program_size, base, len(tail))
    root = struct.unpack_from("<I", flat, 0)[0] + HEADER_LENGTH
    program = struct.pack("<I", root) + flat[4:8] + header + flat[8:]
    return program.ljust(base, b"\0") + bytes(tail)
