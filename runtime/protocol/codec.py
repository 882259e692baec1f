"""msgpack framing of protocol messages.

A message is one header frame (a msgpack map) followed by zero or more data frames holding array
bytes. Decoding refuses extension types, non-string map keys, oversized input and anything that is not
exactly the documented shape; nothing executes on decode. Server side: :func:`decode_request`,
:func:`encode_reply`, :func:`encode_error`. Client side: :func:`encode_request`, :func:`decode_reply`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import msgpack
import numpy as np

from runtime.errors import LerobotRuntimeError
from runtime.protocol.arrays import decode_array, frame_descriptor, wire_array
from runtime.protocol.errors import (
    BadRequestError,
    ErrorInfo,
    TooLargeError,
    UnsupportedKindError,
    UnsupportedVersionError,
    refuse_unexpected,
)
from runtime.protocol.messages import (
    CONTROL_KINDS,
    KINDS,
    MAX_REQUEST_ID,
    PREFIX_FIELDS,
    PROTOCOL_VERSION,
    RESERVED_KIND_PREFIXES,
    SUPPORTED_VERSIONS,
    TELEOP_KINDS,
    ActionChunk,
    ControlRequest,
    HelloRequest,
    InferRequest,
    Percentiles,
    PingRequest,
    PolicyInfo,
    Pong,
    PrefixFields,
    Request,
    StatsRequest,
    StatsSnapshot,
    TensorInfo,
    Timing,
)
from runtime.protocol.teleop import parse_teleop

_REQUEST_KEYS: Final = frozenset(("v", "id", "kind", "body"))
_INFER_BODY_KEYS: Final = frozenset(("observation", "reset", "task", *PREFIX_FIELDS))
Buffer = bytes | memoryview


class ProtocolError(LerobotRuntimeError, ValueError):
    """A reply the client cannot read (wrong shape, unknown version): the server is not speaking v1."""


def _pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _refuse_ext(code: int, data: bytes) -> NoReturn:
    raise ValueError(f"msgpack extension type {code} is not part of the protocol")


@dataclass(frozen=True)
class _Ext:
    """Stands in for a msgpack extension value, so the rest of the header (its id) can still be read."""

    code: int


def _mark_ext(code: int, data: bytes) -> _Ext:
    return _Ext(code)


def _find_ext(value: Any, where: str) -> tuple[str, _Ext] | None:
    """Where the first extension value sits in a decoded header (``body.observation.x``), if any."""
    if isinstance(value, _Ext):
        return where, value
    if isinstance(value, msgpack.Timestamp):  # extension -1, decoded by msgpack itself
        return where, _Ext(-1)
    if isinstance(value, dict):
        for k, v in value.items():
            found = _find_ext(v, f"{where}.{k}" if where else str(k))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _find_ext(v, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def _unpack(data: Buffer, ext_hook: Callable[[int, bytes], Any] = _refuse_ext) -> Any:
    # Sizes were checked on the whole message before this; msgpack's own length prefixes can
    # only describe bytes that are present, so a lying prefix fails as "incomplete input".
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        use_list=True,
        ext_hook=ext_hook,
    )


def _type_name(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- server side -----------------------------------------------------------------------------


MAX_HEADER_PEEK_BYTES: Final = 64 * 1024  # the largest header read just to echo an oversized message's id


def peek_request_id(header: Any) -> int | None:
    """The request id of a decoded header, if it has a valid one (so errors can echo it)."""
    if isinstance(header, dict):
        rid = header.get("id")
        if type(rid) is int and 0 <= rid <= MAX_REQUEST_ID:
            return rid
    return None


def decode_request(frames: Sequence[Buffer], max_message_bytes: int) -> Request:
    """Parse a request (header frame + data frames); raises a ``ServerError`` subclass to reply with."""
    if not frames:
        raise BadRequestError(
            "empty message", field="(header)", expected="a msgpack header frame", received="nothing"
        )
    total = 0
    for f in frames:
        total += len(f) if isinstance(f, bytes) else f.nbytes
    header_bytes = len(frames[0]) if isinstance(frames[0], bytes) else frames[0].nbytes
    if total > max_message_bytes:
        error = TooLargeError(
            f"message of {total} bytes is over this server's limit of {max_message_bytes}",
            field="(message)",
            expected=f"<= {max_message_bytes} bytes",
            received=f"{total} bytes",
        )
        if header_bytes <= min(max_message_bytes, MAX_HEADER_PEEK_BYTES):
            # a small header is cheap to read: the reply can still name the request (if unreadable: no id)
            with contextlib.suppress(Exception):
                error.request_id = peek_request_id(_unpack(frames[0], _mark_ext))
        raise error
    try:
        header = _unpack(frames[0], _mark_ext)
    except UnicodeDecodeError as e:  # a msgpack str whose bytes are not UTF-8: name where it is
        where = _bad_utf8(frames[0])
        raise BadRequestError(
            f"{where}: a msgpack string that is not valid UTF-8 ({e.reason} at byte {e.start})",
            field=where,
            expected="a UTF-8 string",
            received=f"{e.end - e.start} invalid byte(s) {e.object[e.start : e.end]!r}",
        ) from None
    except Exception as e:  # msgpack raises ValueError, ExtraData, FormatError, StackError...
        raise BadRequestError(
            f"header frame is not a single msgpack map: {e}",
            field="(header)",
            expected="msgpack map",
            received=f"{len(frames[0])} undecodable bytes",
        ) from None
    rid = peek_request_id(header)
    ext = _find_ext(header, "")
    if ext is not None:
        raise BadRequestError(
            f"header.{ext[0]}: msgpack extension type {ext[1].code} is not part of the protocol",
            field=ext[0],
            expected="plain msgpack types (nil, bool, int, float, str, bin, array, map)",
            received=f"extension type {ext[1].code}",
            request_id=rid,
        )
    try:
        return _parse_request(header, frames[1:], rid)
    except BadRequestError as e:
        e.request_id = rid
        raise
    except (UnsupportedVersionError, UnsupportedKindError) as e:
        e.request_id = rid
        raise


def _bad_utf8(frame: Buffer) -> str:
    """Where in a header a string is not UTF-8 (``body.task``), read with strings left as bytes."""
    try:
        raw = msgpack.unpackb(frame, raw=True, strict_map_key=False, ext_hook=_mark_ext)
    except Exception:
        return "(header)"

    def find(value: Any, where: str) -> str | None:
        if isinstance(value, bytes):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return where or "(header)"
            return None
        if isinstance(value, dict):
            for k, v in value.items():
                key = k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k)
                if isinstance(k, bytes) and find(k, "x") is not None:
                    return f"{where}.(key)" if where else "(key)"
                found = find(v, f"{where}.{key}" if where else key)
                if found is not None:
                    return found
        if isinstance(value, list):
            for i, v in enumerate(value):
                found = find(v, f"{where}[{i}]")
                if found is not None:
                    return found
        return None

    return find(raw, "") or "(header)"


def _parse_request(header: Any, data: Sequence[Buffer], rid: int | None) -> Request:
    if not isinstance(header, dict):
        raise BadRequestError(
            f"header: expected a msgpack map, got {_type_name(header)}",
            field="(header)",
            expected="map",
            received=_type_name(header),
        )
    version = header.get("v")
    if version is None:
        raise BadRequestError(
            "header: missing protocol version 'v'",
            field="v",
            expected=str(PROTOCOL_VERSION),
            received="nothing",
        )
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersionError(
            f"protocol version {_short(version)} is not supported; this server speaks {PROTOCOL_VERSION}",
            field="v",
            expected=" | ".join(map(str, SUPPORTED_VERSIONS)),
            received=_short(version),
        )
    if rid is None:
        shown = _short(header["id"]) if "id" in header else "nothing"
        raise BadRequestError(
            f"header.id: expected an integer in [0, 2**64), got {shown}",
            field="id",
            expected="integer in [0, 2**64)",
            received=shown,
        )
    unknown = set(header) - _REQUEST_KEYS
    if unknown:
        key = sorted(map(str, unknown))[0]
        raise BadRequestError(
            f"header: unknown key {key!r}", field=key, expected="v, id, kind, body", received=key
        )
    kind = header.get("kind")
    if not isinstance(kind, str):
        raise BadRequestError(
            f"header.kind: expected a string, got {_short(kind) if 'kind' in header else 'nothing'}",
            field="kind",
            expected=" | ".join(KINDS),
            received=_short(kind) if "kind" in header else "nothing",
        )
    body = header.get("body", {})
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadRequestError(
            f"header.body: expected a map, got {_type_name(body)}",
            field="body",
            expected="map",
            received=_type_name(body),
        )
    if kind == "infer":
        return _parse_infer(rid, body, data)
    if kind in CONTROL_KINDS:
        return _parse_control(rid, kind, body, data)
    if kind in TELEOP_KINDS:
        return parse_teleop(rid, kind, body, data)
    if kind not in KINDS:
        reserved = kind.startswith(RESERVED_KIND_PREFIXES)
        raise UnsupportedKindError(
            f"kind {_short(kind)} is {'reserved for a later protocol version' if reserved else 'unknown'}; "
            f"this server answers {', '.join(KINDS)}",
            field="kind",
            expected=" | ".join(KINDS),
            received=_short(kind),
        )
    if body or data:
        raise BadRequestError(
            f"{kind}: takes no body and no data frames",
            field="body",
            expected="empty",
            received=f"{len(body)} body keys, {len(data)} data frames",
        )
    if kind == "ping":
        return PingRequest(rid)
    if kind == "hello":
        return HelloRequest(rid)
    return StatsRequest(rid)


_CONTROL_TEXT_MAX: Final = 200
_LATCH_MAX: Final = 2**63 - 1
_CONTROL_KEYS: Final = {
    "control.estop": {"who", "reason"},
    "control.release": {"who", "latch"},
    "control.start": {"who", "task"},
}
#: a task is bounded again, by the policy's own limit, where it is used (runtime.server.tasks)
_CONTROL_TASK_MAX: Final = 4096


def _parse_control(rid: int, kind: str, body: dict[Any, Any], data: Sequence[Buffer]) -> ControlRequest:
    allowed = _CONTROL_KEYS.get(kind, {"who"})
    refuse_unexpected(kind, body, allowed, data)
    latch = 0
    if "latch" in allowed:
        # Required: a release that named no latch would clear one its operator never saw.
        latch = body.get("latch", 0)
        if type(latch) is not int or not 1 <= latch <= _LATCH_MAX:
            raise BadRequestError(
                f"{kind} body.latch: expected the e-stop latch to release (an integer >= 1, as control.estop "
                f"and control.status report it), got "
                + (f"{_type_name(latch)} {_short(latch)}" if "latch" in body else "nothing"),
                field="body.latch",
                expected="integer >= 1",
                received=_short(latch) if "latch" in body else "nothing",
            )
    text: dict[str, str] = {}
    for key in allowed - {"latch"}:
        value = body.get(key, "")
        most = _CONTROL_TASK_MAX if key == "task" else _CONTROL_TEXT_MAX
        if not isinstance(value, str) or len(value) > most:
            raise BadRequestError(
                f"{kind} body.{key}: expected a string of at most {most} characters, got "
                f"{_type_name(value)} {_short(value)}",
                field=f"body.{key}",
                expected=f"string <= {most} chars",
                received=_short(value),
            )
        text[key] = value
    return ControlRequest(rid, kind, text.get("who", ""), text.get("reason", ""), latch, text.get("task", ""))


def _parse_infer(rid: int, body: dict[Any, Any], data: Sequence[Buffer]) -> InferRequest:
    unknown = set(body) - _INFER_BODY_KEYS
    if unknown:
        key = sorted(map(str, unknown))[0]
        raise BadRequestError(
            f"infer body: unknown key {key!r}",
            field=f"body.{key}",
            expected=", ".join(("observation", "reset", "task", *PREFIX_FIELDS)),
            received=key,
        )
    reset = body.get("reset", False)
    if not isinstance(reset, bool):
        raise BadRequestError(
            f"body.reset: expected true or false, got {_type_name(reset)}",
            field="body.reset",
            expected="bool",
            received=_type_name(reset),
        )
    task = body.get("task")
    if task is not None and not isinstance(task, str):
        raise BadRequestError(
            f"body.task: expected a UTF-8 string, got {_type_name(task)}",
            field="body.task",
            expected="str (msgpack str, UTF-8)",
            received=_type_name(task),
        )
    obs_raw = body.get("observation")
    if not isinstance(obs_raw, dict):
        raise BadRequestError(
            f"body.observation: expected a map of input name to array, got "
            f"{_type_name(obs_raw) if 'observation' in body else 'nothing'}",
            field="body.observation",
            expected="map of name -> array descriptor",
            received=_type_name(obs_raw) if "observation" in body else "nothing",
        )
    views = [f if isinstance(f, memoryview) else memoryview(f) for f in data]
    used = [False] * len(views)
    observation: dict[str, np.ndarray] = {}
    for name, desc in obs_raw.items():
        observation[name] = decode_array(desc, views, used, name)
    rtc = _parse_prefix_fields(body, views, used)
    if not all(used):
        index = used.index(False)
        raise BadRequestError(
            f"data frame {index} is not referenced by any array",
            field="(frames)",
            expected=f"{sum(used)} data frames",
            received=f"{len(used)} data frames",
        )
    return InferRequest(rid, observation, reset=reset, task=task, rtc=rtc)


def _parse_prefix_fields(body: dict[Any, Any], views: Sequence[memoryview], used: list[bool]) -> PrefixFields:
    """The real-time chunking keys' types (their bounds depend on the policy: runtime.server.rtc)."""
    prefix = body.get("prefix")
    if prefix is not None:
        prefix = decode_array(prefix, views, used, "body.prefix")
    ints: dict[str, int | None] = {}
    for key in ("delay", "execution_horizon"):
        value = body.get(key)
        if value is not None and type(value) is not int:
            raise BadRequestError(
                f"body.{key}: expected an integer number of steps, got {_type_name(value)} {_short(value)}",
                field=f"body.{key}",
                expected="int",
                received=_type_name(value),
            )
        ints[key] = value
    schedule = body.get("prefix_attention_schedule")
    if schedule is not None and not isinstance(schedule, str):
        raise BadRequestError(
            f"body.prefix_attention_schedule: expected a string, got {_type_name(schedule)}",
            field="body.prefix_attention_schedule",
            expected="str",
            received=_type_name(schedule),
        )
    cap = body.get("max_guidance_weight")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))):
        raise BadRequestError(
            f"body.max_guidance_weight: expected a number, got {_type_name(cap)}",
            field="body.max_guidance_weight",
            expected="float",
            received=_type_name(cap),
        )
    return PrefixFields(
        prefix, ints["delay"], ints["execution_horizon"], schedule, None if cap is None else float(cap)
    )


def _timing_wire(t: Timing) -> dict[str, float]:
    return {"queue_ms": t.queue_ms, "infer_ms": t.infer_ms, "total_ms": t.total_ms}


def encode_reply(kind: str, request_id: int, body: Mapping[str, Any], timing: Timing) -> bytes:
    """The header frame of a successful reply (data frames, if any, are appended by the caller)."""
    return _pack(
        {
            "v": PROTOCOL_VERSION,
            "id": request_id,
            "kind": kind,
            "ok": True,
            "body": body,
            "timing": _timing_wire(timing),
        }
    )


def encode_error(kind: str | None, request_id: int | None, error: ErrorInfo, timing: Timing) -> bytes:
    """The single frame of an error reply; ``kind`` and ``request_id`` are nil when unreadable."""
    return _pack(
        {
            "v": PROTOCOL_VERSION,
            "id": request_id,
            "kind": kind,
            "ok": False,
            "error": error.to_wire(),
            "timing": _timing_wire(timing),
        }
    )


def encode_actions_reply(request_id: int, actions: np.ndarray, timing: Timing) -> list[Buffer]:
    """Header + one data frame with the action chunk."""
    arr = wire_array(actions)
    header = encode_reply("infer", request_id, {"actions": frame_descriptor(arr, 0)}, timing)
    # A copy on purpose: engines may return views of buffers the next inference overwrites, and
    # the reply can still be queued in ZeroMQ by then. Action chunks are a few kB.
    return [header, arr.tobytes()]


# --- client side -----------------------------------------------------------------------------


def encode_request(
    kind: str,
    request_id: int,
    observation: Mapping[str, np.ndarray] | None = None,
    body: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Frames of a request: header then one data frame per observation array (sent zero-copy).

    ``body`` is for kinds without arrays (``control.*``, ``teleop.*``); an observation makes the infer
    body, and ``body`` then adds to it (``{"reset": True}``); an array in ``body`` (real-time chunking's
    ``prefix``) travels in a data frame of its own, like the observation's.
    """
    frames: list[Any] = [b""]
    if observation is None:
        header: dict[str, Any] = {"v": PROTOCOL_VERSION, "id": request_id, "kind": kind}
        if body:
            header["body"] = dict(body)
    else:
        obs: dict[str, Any] = {}
        for name, value in observation.items():
            arr = wire_array(np.asarray(value))
            obs[name] = frame_descriptor(arr, len(frames) - 1)
            frames.append(arr)
        extra: dict[str, Any] = {}
        for key, value in (body or {}).items():
            if isinstance(value, np.ndarray):
                arr = wire_array(value)
                extra[key] = frame_descriptor(arr, len(frames) - 1)
                frames.append(arr)
            else:
                extra[key] = value
        header = {"v": PROTOCOL_VERSION, "id": request_id, "kind": kind, "body": {**extra, "observation": obs}}
    frames[0] = _pack(header)
    return frames


@dataclass(frozen=True, slots=True)
class Reply:
    """A decoded reply envelope; ``body`` is still the raw map until a typed accessor reads it."""

    id: int | None
    kind: str | None
    ok: bool
    body: Mapping[str, Any]
    error: ErrorInfo | None
    timing: Timing
    data: Sequence[memoryview]


def _need(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
        raise ProtocolError(f"reply {where}.{key}: unexpected {_type_name(value)} {_short(value)}")
    return value


def _opt_str(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) else None


def decode_reply(frames: Sequence[Buffer]) -> Reply:
    if not frames:
        raise ProtocolError("empty reply")
    try:
        header = _unpack(frames[0])
    except Exception as e:
        raise ProtocolError(f"reply header is not msgpack: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"reply header: expected a map, got {_type_name(header)}")
    if header.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(
            f"reply protocol version {_short(header.get('v'))}, this client speaks {PROTOCOL_VERSION}"
        )
    rid = header.get("id")
    t = header.get("timing") or {}
    timing = (
        Timing(float(t.get("queue_ms", 0.0)), float(t.get("infer_ms", 0.0)), float(t.get("total_ms", 0.0)))
        if isinstance(t, dict)
        else Timing()
    )
    data = [f if isinstance(f, memoryview) else memoryview(f) for f in frames[1:]]
    kind = header.get("kind")
    if header.get("ok") is True:
        body = header.get("body") or {}
        if not isinstance(body, dict):
            raise ProtocolError(f"reply body: expected a map, got {_type_name(body)}")
        return Reply(
            rid if type(rid) is int else None,
            kind if isinstance(kind, str) else None,
            True,
            body,
            None,
            timing,
            data,
        )
    err = header.get("error")
    if not isinstance(err, dict) or not isinstance(err.get("code"), str):
        raise ProtocolError(f"error reply without an error code: {_short(err)}")
    info = ErrorInfo(
        err["code"],
        _opt_str(err, "message") or "",
        _opt_str(err, "field"),
        _opt_str(err, "expected"),
        _opt_str(err, "received"),
    )
    return Reply(
        rid if type(rid) is int else None,
        kind if isinstance(kind, str) else None,
        False,
        {},
        info,
        timing,
        data,
    )


def actions_from_reply(reply: Reply, round_trip_ms: float) -> ActionChunk:
    used = [False] * len(reply.data)
    try:
        actions = decode_array(reply.body.get("actions"), reply.data, used, "actions")
    except BadRequestError as e:
        raise ProtocolError(f"reply: {e.message}") from None
    return ActionChunk(reply.id or 0, actions, reply.timing, round_trip_ms)


def pong_from_reply(reply: Reply, round_trip_ms: float) -> Pong:
    return Pong(
        reply.id or 0, float(_need(reply.body, "uptime_s", (int, float), "body")), reply.timing, round_trip_ms
    )


def _tensors(raw: Any, where: str) -> tuple[TensorInfo, ...]:
    if not isinstance(raw, list):
        raise ProtocolError(f"reply {where}: expected a list, got {_type_name(raw)}")
    out = []
    for item in raw:
        if not isinstance(item, dict):
            raise ProtocolError(f"reply {where}: expected maps, got {_type_name(item)}")
        out.append(
            TensorInfo(
                str(_need(item, "name", str, where)),
                str(_need(item, "dtype", str, where)),
                tuple(int(d) for d in _need(item, "shape", list, where)),
                str(item.get("role", "other")),
            )
        )
    return tuple(out)


def policy_info_from_reply(reply: Reply) -> PolicyInfo:
    b = reply.body
    action = _need(b, "action", dict, "body")
    limits = _need(b, "limits", dict, "body")
    policy = _need(b, "policy", dict, "body")
    return PolicyInfo(
        protocol_version=int(_need(b, "protocol_version", int, "body")),
        server_version=str(_need(b, "server_version", str, "body")),
        policy_name=str(_need(policy, "name", str, "body.policy")),
        inputs=_tensors(b.get("inputs"), "inputs"),
        outputs=_tensors(b.get("outputs"), "outputs"),
        action_output=str(_need(action, "output", str, "body.action")),
        chunk_length=int(_need(action, "chunk_length", int, "body.action")),
        action_names=tuple(str(n) for n in _need(action, "names", list, "body.action")),
        control_rate_hz=float(_need(b, "control_rate_hz", (int, float), "body")),
        engine=dict(_need(b, "engine", dict, "body")),
        versions={str(k): str(v) for k, v in _need(b, "versions", dict, "body").items()},
        kinds=tuple(str(k) for k in _need(b, "kinds", list, "body")),
        max_message_bytes=int(_need(limits, "max_message_bytes", int, "body.limits")),
        queue_depth=int(_need(limits, "queue_depth", int, "body.limits")),
        arm=_arm(b),
        **_observation(b),
    )


def _observation(body: Mapping[str, Any]) -> dict[str, Any]:
    """History frames and server-drawn inputs; absent from servers that predate them (1, none)."""
    raw = body.get("observation")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError(f"reply body.observation: expected a map, got {_type_name(raw)}")
    frames = _need(raw, "history_frames", int, "body.observation")
    drawn = _need(raw, "server_drawn", list, "body.observation")
    task = raw.get("task")  # absent from servers that predate tasks, nil for a policy without one
    if task is not None and not isinstance(task, dict):
        raise ProtocolError(f"reply body.observation.task: expected a map or nil, got {_type_name(task)}")
    max_bytes = int(_need(task, "max_bytes", int, "body.observation.task")) if task else 0
    prefix = raw.get("prefix")  # absent from servers that predate real-time chunking, nil without a prefix
    if prefix is not None and not isinstance(prefix, dict):
        raise ProtocolError(f"reply body.observation.prefix: expected a map or nil, got {_type_name(prefix)}")
    rtc: dict[str, Any] = {}
    if prefix:
        rtc = {
            "prefix_steps": int(_need(prefix, "max_steps", int, "body.observation.prefix")),
            "max_delay": int(_need(prefix, "max_delay", int, "body.observation.prefix")),
            "prefix_defaults": {k: v for k, v in prefix.items() if k not in ("max_steps", "max_delay")},
        }
    return {
        "history_frames": int(frames),
        "noise_inputs": tuple(str(n) for n in drawn),
        "max_task_bytes": max_bytes,
        **rtc,
    }


def _arm(body: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = body.get("arm")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProtocolError(f"reply body.arm: expected a map or nil, got {_type_name(raw)}")
    return {str(k): v for k, v in raw.items()}


def stats_from_reply(reply: Reply) -> StatsSnapshot:
    b = reply.body
    queue = _need(b, "queue", dict, "body")
    latency: dict[str, Percentiles] = {}
    for name, p in _need(b, "latency_ms", dict, "body").items():
        if isinstance(p, dict):
            latency[str(name)] = Percentiles(
                int(p.get("count", 0)),
                float(p.get("p50", 0.0)),
                float(p.get("p90", 0.0)),
                float(p.get("p99", 0.0)),
                float(p.get("max", 0.0)),
            )
    return StatsSnapshot(
        uptime_s=float(_need(b, "uptime_s", (int, float), "body")),
        requests={str(k): int(v) for k, v in _need(b, "requests", dict, "body").items()},
        errors={str(k): int(v) for k, v in _need(b, "errors", dict, "body").items()},
        replies_ok=int(_need(b, "replies_ok", int, "body")),
        queue_depth=int(_need(queue, "depth", int, "body.queue")),
        queue_depth_max=int(_need(queue, "depth_max", int, "body.queue")),
        queue_capacity=int(_need(queue, "capacity", int, "body.queue")),
        in_flight=int(_need(queue, "in_flight", int, "body.queue")),
        latency_ms=latency,
        arm=_arm(b),
        clients=int(b.get("clients", 0)),
        inference_cpus={int(k): int(v) for k, v in dict(b.get("inference_cpus") or {}).items()},
        engine=dict(b.get("engine") or {}),
        verification=dict(verification) if isinstance(verification := b.get("verification"), dict) else {},
        # an older server counts none apart
        local_requests={str(k): int(v) for k, v in dict(b.get("local_requests") or {}).items()},
        local_errors={str(k): int(v) for k, v in dict(b.get("local_errors") or {}).items()},
    )
