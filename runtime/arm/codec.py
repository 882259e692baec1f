"""How the link's messages travel: the one place that turns them into bytes and back.

A message is one msgpack map: ``t`` holds its kind (:data:`runtime.arm.messages.KINDS`), each field
its value under the field's own name; a field at its default of None or False is left out and taken
as the default on arrival. Arrays travel as ``[dtype, shape, bytes]`` (numeric dtypes only, the bytes
copied out on arrival); the joint values of a snapshot, an episode record and a teleop target as lists
of floats; a latch as ``[id, reason, requested_at]``; a command as ``[word, who, latch]``; the
configuration as the maps its own parsers take (``from_mapping``, ``parse_interface``).

Decoding takes nothing on trust: a datagram that is not msgpack, not a map, of an unknown kind, or
with a field missing, unknown or of the wrong type is refused with a
:class:`~runtime.errors.LinkProtocolError` that names the kind, the field, what was expected and what
came. :class:`~runtime.arm.messages.Init`'s version is read before anything else of it, so a daemon of
another version is refused as such (:class:`~runtime.errors.LinkVersionError`), not field by field.

Each kind's fields are a table built at import: sending and receiving walk it, with no introspection
per message (the arm process encodes a :class:`~runtime.arm.messages.Tick` every tick).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any, Final, NoReturn

import msgpack
import numpy as np

from drivers.bus import JointState
from drivers.config import ArmConfig
from drivers.configtools import from_mapping
from runtime.arm import messages as m
from runtime.bundle.interface import parse_interface
from runtime.control.config import ControlConfig
from runtime.control.feed import Blocked, Prefix
from runtime.control.latch import Latch
from runtime.control.mailbox import Release, Shutdown, Start, Stop, TakeOver, parse, word
from runtime.control.mode import Mode
from runtime.control.snapshot import Snapshot
from runtime.control.target import Target
from runtime.errors import LinkProtocolError, LinkVersionError
from runtime.teleop.config import TeleopConfig

__all__ = ["decode", "encode"]

_MISSING: Final[Any] = object()


class _Wrong(Exception):
    """A value its field does not take, raised by the value decoders and named by :func:`decode`.

    ``at``: the path below the field (``tick`` in a snapshot); ``expected``: None for the field's own
    words; ``got``: the value (``_MISSING`` when absent); ``why``: said instead of "expected ..., got
    ..." when that says it better (a configuration's own error)."""

    def __init__(self, got: Any, *, expected: str | None = None, at: str = "", why: str | None = None) -> None:
        super().__init__(why or expected)
        self.got = got
        self.expected = expected
        self.at = at
        self.why = why


@dataclass(frozen=True, slots=True)
class _Value:
    """How one field's value travels: ``encode`` to msgpack's types, ``decode`` back (raising
    :class:`_Wrong`), and what it is, in words. A value of type ``exact`` as it arrives is taken
    without calling ``decode`` (the scalars: most of a snapshot)."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    expected: str
    exact: type | None = None


def _wrong(got: Any) -> NoReturn:
    raise _Wrong(got)


# --- scalars ------------------------------------------------------------------------------------------


def _int(v: Any) -> int:
    if type(v) is int:
        return v
    _wrong(v)


def _float(v: Any) -> float:
    if type(v) is float:
        return v
    if type(v) is int:
        return float(v)
    _wrong(v)


def _str(v: Any) -> str:
    if type(v) is str:
        return v
    _wrong(v)


def _bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    _wrong(v)


INT = _Value(int, _int, "an integer", int)
FLOAT = _Value(float, _float, "a number", float)
STR = _Value(str, _str, "a string", str)
BOOL = _Value(bool, _bool, "true or false", bool)


def _optional(value: _Value) -> _Value:
    encode, decode = value.encode, value.decode
    return _Value(
        lambda v: None if v is None else encode(v),
        lambda v: None if v is None else decode(v),
        f"{value.expected} or nil",
    )


def _list_of(v: Any, n: int) -> list[Any]:
    if type(v) is list and len(v) == n:
        return v
    _wrong(v)


def _part(decode: Callable[[Any], Any], v: Any, at: str, expected: str) -> Any:
    """One part of a compound value, named by ``at`` when it is wrong."""
    try:
        return decode(v)
    except _Wrong as e:
        raise _Wrong(e.got, expected=e.expected or expected, at=_join(at, e.at), why=e.why) from None


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


# --- arrays -------------------------------------------------------------------------------------------

_ARRAY = "an array [dtype, shape, bytes] of a numeric dtype"


def encode_array(a: np.ndarray) -> list[Any]:
    a = np.ascontiguousarray(a)
    return [a.dtype.str, list(a.shape), a.tobytes()]


def decode_array(v: Any) -> np.ndarray:
    dtype, shape, data = _list_of(v, 3)
    if type(dtype) is not str or type(shape) is not list or type(data) is not bytes:
        _wrong(v)
    dt = _DTYPES.get(dtype) or _numeric_dtype(dtype)
    for n in shape:
        if type(n) is not int or n < 0:
            raise _Wrong(shape, expected="a list of sizes", at="shape")
    need = math.prod(shape) * dt.itemsize
    if len(data) != need:
        raise _Wrong(data, why=f"holds {len(data)} bytes where shape {shape} of {dtype} takes {need}")
    return np.frombuffer(data, dtype=dt).reshape(shape).copy()


#: the numeric dtypes met so far, by their name on the wire (parsing one costs more than the copy)
_DTYPES: dict[str, np.dtype[Any]] = {}


def _numeric_dtype(name: str) -> np.dtype[Any]:
    try:
        dt = np.dtype(name)
    except (TypeError, ValueError):
        raise _Wrong(name, expected="a numeric dtype", at="dtype") from None
    if dt.kind not in "biuf":
        raise _Wrong(name, expected="a numeric dtype", at="dtype")
    if len(_DTYPES) < 64:  # a peer sending a new name each time keeps paying, not growing this
        _DTYPES[name] = dt
    return dt


def encode_floats(a: np.ndarray) -> list[float]:
    floats: list[float] = np.asarray(a, dtype=np.float64).tolist()
    return floats


def decode_floats(v: Any) -> np.ndarray:
    """A list of numbers as a float64 array."""
    if type(v) is not list:
        _wrong(v)
    for x in v:
        if type(x) is not float and type(x) is not int:
            _wrong(v)
    return np.array(v, dtype=np.float64)


ARRAY = _Value(encode_array, decode_array, _ARRAY)
FLOATS = _Value(encode_floats, decode_floats, "a list of numbers")


# --- maps and lists -----------------------------------------------------------------------------------


def _map(v: Any) -> dict[str, Any]:
    if type(v) is not dict:
        _wrong(v)
    for k in v:
        if type(k) is not str:
            raise _Wrong(k, expected="string keys")
    return v


def _map_of(decode: Callable[[Any], Any], expected: str, exact: type | None = None) -> Callable[[Any], dict[str, Any]]:
    """A map with string keys whose values ``decode`` takes (a value of type ``exact`` as it is)."""

    def decode_map(v: Any) -> dict[str, Any]:
        if type(v) is not dict:
            _wrong(v)
        for k, x in v.items():
            if type(k) is not str:
                raise _Wrong(k, expected="string keys")
            if type(x) is not exact:
                v[k] = _part(decode, x, k, expected)
        return v

    return decode_map


def _strs(v: Any) -> tuple[str, ...]:
    if type(v) is not list:
        _wrong(v)
    for x in v:
        if type(x) is not str:
            _wrong(v)
    return tuple(v)


MAP = _Value(lambda v: v if type(v) is dict else dict(v), _map, "a map with string keys")
STRS = _Value(list, _strs, "a list of strings")
PATH = _Value(str, lambda v: Path(_str(v)), "a path")
FLOAT_MAP = _Value(
    lambda v: {str(k): float(x) for k, x in v.items()}, _map_of(_float, "a number", float), "a map of numbers"
)


# --- the control loop's values ------------------------------------------------------------------------


def _decode_latch(v: Any) -> Latch:
    latch_id, reason, at = _list_of(v, 3)
    return Latch(
        _part(_int, latch_id, "id", "an integer"),
        _part(_str, reason, "reason", "a string"),
        _part(_float, at, "requested_at", "a number"),
    )


def _decode_blocked(v: Any) -> Blocked:
    key, reason, stale = _list_of(v, 3)
    return Blocked(
        _part(_str, key, "key", "a string"),
        _part(_str, reason, "reason", "a string"),
        _part(_strs, stale, "stale", "a list of strings"),
    )


def _decode_prefix(v: Any) -> Prefix:
    actions, delay = _list_of(v, 2)
    return Prefix(_part(decode_array, actions, "actions", _ARRAY), _part(_int, delay, "delay", "an integer"))


def _decode_target(v: Any) -> Target:
    seq, positions, at = _list_of(v, 3)
    return Target(
        _part(_int, seq, "seq", "an integer"),
        _part(decode_floats, positions, "positions", "a list of numbers"),
        _part(_float, at, "received_at", "a number"),
    )


def _decode_command(v: Any) -> Start | TakeOver | Stop | Release:
    name, who, latch = _list_of(v, 3)
    name = _part(_str, name, "word", "a string")
    who = _part(_str, who, "who", "a string")
    latch = _part(_int, latch, "latch", "an integer")
    try:
        command = parse(name, who, latch)
    except ValueError as e:  # a word this version does not know
        raise _Wrong(name, at="word", why=str(e)) from None
    assert not isinstance(command, Shutdown)  # parse knows no word for it: that is ShutdownRequest
    return command


LATCH = _Value(lambda x: [x.id, x.reason, x.requested_at], _decode_latch, "[id, reason, requested_at]")
BLOCKED = _Value(lambda b: [b.key, b.reason, list(b.stale)], _decode_blocked, "[key, reason, [stream, ...]]")
PREFIX = _Value(lambda p: [encode_array(p.actions), int(p.delay)], _decode_prefix, f"[{_ARRAY}, delay]")
TARGET = _Value(
    lambda t: [int(t.seq), encode_floats(t.positions), float(t.received_at)],
    _decode_target,
    "[seq, [position, ...], received_at]",
)
COMMAND = _Value(
    lambda c: [word(c), c.who, c.latch if isinstance(c, Release) else 0], _decode_command, "[word, who, latch]"
)

_JOINT = attrgetter("position", "raw_position", "goal", "velocity_raw", "load_raw", "voltage_v", "temperature_c")
_JOINT_WORDS = "[position, raw_position, goal, velocity_raw, load_raw, voltage_v, temperature_c]"


def _decode_joint(v: Any) -> JointState:
    if type(v) is list and len(v) == 7:
        position, raw_position, goal, velocity, load, voltage, temperature = v
        if type(raw_position) is int and type(velocity) is int and type(load) is int and type(temperature) is int:
            if type(position) is float and type(goal) is float and type(voltage) is float:
                return JointState(position, raw_position, goal, velocity, load, voltage, temperature)
            try:
                return JointState(
                    _float(position), raw_position, _float(goal), velocity, load, _float(voltage), temperature
                )
            except _Wrong:
                pass
    _wrong(v)


def _decode_cpu_seen(v: Any) -> dict[int, int]:
    if type(v) is not dict:
        _wrong(v)
    for k, n in v.items():
        if type(k) is not int or type(n) is not int:
            raise _Wrong({k: n}, expected="a map of CPU numbers to tick counts")
    return v


def _decode_mode(v: Any) -> Mode:
    try:
        return Mode(_str(v))
    except ValueError:
        _wrong(v)


MODE = _Value(lambda x: x.value, _decode_mode, f"one of {', '.join(Mode)}")
COUNTS = _Value(dict, _map_of(_int, "an integer", int), "a map of integers")


# --- records: the messages, and the snapshot inside a tick ------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    value: _Value
    #: taken when the field is absent (a value of None or False is left out when it is the default)
    default: Any = _MISSING


def _left_out(default: Any) -> Any:
    """The value a field is left out at: its default when that is None or False (never one that
    equals another value without being it, as 0.0 would)."""
    return default if default is None or default is False else _MISSING


class _Record:
    """A value that travels as a map of named fields, built by ``build`` from them in order.

    ``encode``: a function of the value to its map, written out where a generic walk of the fields
    would cost the tick (the snapshot); ``extra``: keys the map holds besides the fields (``t``)."""

    def __init__(
        self,
        build: Callable[..., Any],
        fields: tuple[_Field, ...],
        *,
        encode: Callable[[Any], dict[str, Any]] | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.build = build
        self.fields = fields
        self.names = frozenset((*(f.name for f in fields), *extra))
        self._extra = len(extra)
        self._encode = encode
        self._decode_plan = tuple((f.name, f.value.exact, f.value.decode, f.value.expected, f.default) for f in fields)
        self._encode_plan = tuple((f.name, f.value.encode, _left_out(f.default)) for f in fields)

    def encode_into(self, out: dict[str, Any], value: Any) -> dict[str, Any]:
        if self._encode is not None:
            out.update(self._encode(value))
            return out
        for name, encode, default in self._encode_plan:
            v = getattr(value, name)
            if v is not default:  # None or False left out: taken as the default on arrival
                out[name] = encode(v)
        return out

    def decode(self, d: Any) -> Any:
        if type(d) is not dict:
            _wrong(d)
        values = []
        taken = self._extra
        for name, exact, decode, expected, default in self._decode_plan:
            v = d.get(name, _MISSING)
            if v is _MISSING:
                if default is _MISSING:
                    raise _Wrong(_MISSING, expected=expected, at=name)
                values.append(default)
                continue
            taken += 1
            if type(v) is exact:
                values.append(v)
                continue
            try:
                values.append(decode(v))
            except _Wrong as e:
                raise _Wrong(e.got, expected=e.expected or expected, at=_join(name, e.at), why=e.why) from None
        if taken != len(d):
            unknown = next(k for k in d if k not in self.names)
            known = ", ".join(f.name for f in self.fields) or "no field"
            raise _Wrong(unknown, at=str(unknown), why=f"is a field this version does not know (it knows {known})")
        return self.build(*values)


def _encode_snapshot(s: Snapshot) -> dict[str, Any]:
    """The snapshot's map, written out: the arm process sends one every tick. Its containers go as they
    are (msgpack takes a Counter as a map and a tuple as a list); a snapshot's are never changed."""
    present = s.present
    latch = s.latch
    return {
        "tick": s.tick,
        "at": s.at,
        "next_due": s.next_due,
        "mode": s.mode.value,
        "latch": None if latch is None else [latch.id, latch.reason, latch.requested_at],
        "latches_taken": s.latches_taken,
        "present": None if present is None else encode_floats(present),
        "state": {n: _JOINT(j) for n, j in s.state.items()},
        "arm_error": s.arm_error,
        "queue_depth": s.queue_depth,
        "dropped_actions": s.dropped_actions,
        "overruns": s.overruns,
        "counters": s.counters,
        "safety": s.safety,
        "last_latency_ticks": s.last_latency_ticks,
        "latencies_measured": s.latencies_measured,
        "teleop_phase": s.teleop_phase,
        "teleop_last_seq": s.teleop_last_seq,
        "teleop_late": s.teleop_late,
        "intervention": s.intervention,
        "cpu_seen": s.cpu_seen,
        "scheduling": s.scheduling,
        "native_id": s.native_id,
        "last_write_at": s.last_write_at,
        "last_write_error_ms": s.last_write_error_ms,
        "write_periods": s.write_periods,
        "writes_off": s.writes_off,
    }


_SNAPSHOT = _Record(
    Snapshot,
    (
        _Field("tick", INT),
        _Field("at", FLOAT),
        _Field("next_due", FLOAT),
        _Field("mode", MODE),
        _Field("latch", _optional(LATCH)),
        _Field("latches_taken", INT),
        _Field("present", _optional(FLOATS)),
        _Field(
            "state",
            _Value(
                lambda s: {n: list(_JOINT(j)) for n, j in s.items()},
                _map_of(_decode_joint, _JOINT_WORDS),
                f"a map of joints to {_JOINT_WORDS}",
            ),
        ),
        _Field("arm_error", STR),
        _Field("queue_depth", INT),
        _Field("dropped_actions", INT),
        _Field("overruns", INT),
        _Field("counters", _Value(dict, lambda v: Counter(COUNTS.decode(v)), "a map of integers")),
        _Field("safety", COUNTS),
        _Field("last_latency_ticks", FLOAT),
        _Field("latencies_measured", INT),
        _Field("teleop_phase", STR),
        _Field("teleop_last_seq", INT),
        _Field("teleop_late", INT),
        _Field("intervention", BOOL),
        _Field("cpu_seen", _Value(dict, _decode_cpu_seen, "a map of CPU numbers to tick counts")),
        _Field("scheduling", STR),
        _Field("native_id", INT),
        _Field("last_write_at", FLOAT),
        _Field("last_write_error_ms", FLOAT),
        _Field("write_periods", INT),
        _Field("writes_off", INT),
    ),
    encode=_encode_snapshot,
)
SNAPSHOT = _Value(_encode_snapshot, _SNAPSHOT.decode, "a snapshot map")

_EPISODE_WORDS = "[now, present, goal, requested, source, intervention]"


def _encode_episode(r: m.EpisodeRecord) -> list[Any]:
    def floats(a: np.ndarray | None) -> list[float] | None:
        return None if a is None else encode_floats(a)

    return [float(r.now), floats(r.present), floats(r.goal), floats(r.requested), r.source, bool(r.intervention)]


def _decode_episode(v: Any) -> m.EpisodeRecord:
    now, present, goal, requested, source, intervention = _list_of(v, 6)
    floats = _optional(FLOATS).decode
    return m.EpisodeRecord(
        _part(_float, now, "now", "a number"),
        _part(floats, present, "present", "a list of numbers or nil"),
        _part(floats, goal, "goal", "a list of numbers or nil"),
        _part(floats, requested, "requested", "a list of numbers or nil"),
        _part(_str, source, "source", "a string"),
        _part(_bool, intervention, "intervention", "true or false"),
    )


EPISODE = _Value(_encode_episode, _decode_episode, _EPISODE_WORDS)


def _config(cls: type[Any], section: str) -> _Value:
    def decode(v: Any) -> Any:
        try:
            return from_mapping(cls, _map(v), section)
        except ValueError as e:  # ConfigError: names the key
            raise _Wrong(v, why=f"is not a [{section}] table this version takes: {e}") from None

    return _Value(asdict, decode, f"a [{section}] table")


def _decode_policy(v: Any) -> Any:
    try:
        return parse_interface(_map(v), "the daemon's policy interface")
    except ValueError as e:  # BundleError: names the field
        raise _Wrong(v, why=f"is not a policy interface this version takes: {e}") from None


# --- the kinds ----------------------------------------------------------------------------------------


class _Kind(_Record):
    def __init__(
        self,
        cls: type[m.Message],
        sender: str,
        fields: tuple[_Field, ...] = (),
        check: Callable[[dict[Any, Any]], None] | None = None,
    ) -> None:
        super().__init__(cls, fields, extra=("t",))
        self.cls = cls
        self.kind = m.KINDS[cls]
        self.sender = sender
        self.check = check

    def refusal(self, e: _Wrong) -> LinkProtocolError:
        who = f"{self.sender}'s {self.kind!r} message"
        expected = e.expected or ""
        if e.got is _MISSING:
            return LinkProtocolError(
                f"{who} has no {e.at!r} (expected {expected})",
                kind=self.kind,
                field=e.at,
                expected=expected,
                received="nothing",
            )
        received = _shown(e.got)
        if e.why is not None:
            return LinkProtocolError(
                f"{who}: {e.at!r} {e.why}", kind=self.kind, field=e.at, expected=expected or None, received=e.why
            )
        return LinkProtocolError(
            f"{who}: {e.at!r} expected {expected}, got {received}",
            kind=self.kind,
            field=e.at,
            expected=expected,
            received=received,
        )


def _check_version(d: dict[Any, Any]) -> None:
    """The daemon's version before anything else of its configuration: a daemon of another version
    lays its fields out otherwise."""
    v = d.get("version", _MISSING)
    if v is _MISSING:
        theirs = "no version (one before version 1)"
    elif type(v) is int:
        if v == m.LINK_VERSION:
            return
        theirs = f"version {v}"
    else:
        theirs = f"version {_shown(v)}"
    raise LinkVersionError(
        f"the daemon speaks link protocol {theirs}, this arm process speaks version {m.LINK_VERSION}: "
        "the two come from different installs; restart the service so that both are the installed one",
        kind="init",
        field="version",
        expected=str(m.LINK_VERSION),
        received=theirs,
    )


DAEMON = "the daemon"
ARM = "the arm process"

_KINDS: Final[tuple[_Kind, ...]] = (
    _Kind(
        m.Init,
        DAEMON,
        (
            _Field("version", INT),
            _Field("control", _config(ControlConfig, "control")),
            _Field("teleop", _config(TeleopConfig, "teleop")),
            _Field("arm", _config(ArmConfig, "arm")),
            _Field("policy", _Value(lambda x: x.to_json(), _decode_policy, "a policy interface map")),
            _Field("cpu", _optional(INT), None),
            _Field("arm_wait_s", FLOAT, 0.0),
            _Field("record", BOOL, False),
        ),
        check=_check_version,
    ),
    _Kind(m.Gate, DAEMON, (_Field("blocked", _optional(BLOCKED), None),)),
    _Kind(
        m.Chunk,
        DAEMON,
        (_Field("id", INT), _Field("actions", _optional(ARRAY), None), _Field("error", _optional(STR), None)),
    ),
    _Kind(m.TargetPut, DAEMON, (_Field("target", TARGET),)),
    _Kind(m.TargetClear, DAEMON),
    _Kind(m.Estop, DAEMON, (_Field("latch", LATCH),)),
    _Kind(m.CommandRequest, DAEMON, (_Field("command", COMMAND),)),
    _Kind(
        m.Dump,
        DAEMON,
        (_Field("id", INT), _Field("directory", PATH), _Field("reason", STR), _Field("extra", MAP)),
    ),
    _Kind(m.ShutdownRequest, DAEMON),
    _Kind(m.Waiting, ARM, (_Field("text", STR),)),
    _Kind(m.Failed, ARM, (_Field("error", STR),)),
    _Kind(m.StatusMap, ARM, (_Field("status", MAP),)),
    _Kind(
        m.Ready,
        ARM,
        (_Field("pid", INT), _Field("memory", STR), _Field("joints", STRS), _Field("positions", FLOAT_MAP)),
    ),
    _Kind(
        m.Tick,
        ARM,
        (_Field("snapshot", SNAPSHOT), _Field("episode", _optional(EPISODE), None), _Field("episode_end", BOOL, False)),
    ),
    _Kind(m.LoopEvent, ARM, (_Field("level", INT), _Field("text", STR))),
    _Kind(
        m.Ask,
        ARM,
        (_Field("id", INT), _Field("state", ARRAY), _Field("reset", BOOL), _Field("prefix", _optional(PREFIX), None)),
    ),
    _Kind(m.Observation, ARM, (_Field("state", ARRAY), _Field("reset", BOOL))),
    _Kind(m.DumpRequest, ARM, (_Field("reason", STR),)),
    _Kind(
        m.Dumped,
        ARM,
        (_Field("id", INT), _Field("path", _optional(PATH), None), _Field("error", _optional(STR), None)),
    ),
    _Kind(m.Bye, ARM, (_Field("ok", BOOL),)),
)
_BY_CLASS: Final[Mapping[type, _Kind]] = {k.cls: k for k in _KINDS}
_BY_KIND: Final[Mapping[str, _Kind]] = {k.kind: k for k in _KINDS}


def _shown(v: Any) -> str:
    text = repr(v)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(v).__name__})"


def _refuse_ext(code: int, data: bytes) -> NoReturn:
    raise ValueError(f"msgpack extension type {code} is not part of the link")


# --- the two ends -------------------------------------------------------------------------------------


def encode(message: m.Message) -> bytes:
    """The datagram for ``message``; TypeError for anything that is not a link message, or a value
    msgpack cannot carry (ValueError, OverflowError for an integer past 64 bits)."""
    kind = _BY_CLASS.get(type(message))
    if kind is None:
        raise TypeError(f"not a link message: {type(message).__name__}")
    data: bytes = msgpack.packb(kind.encode_into({"t": kind.kind}, message), use_bin_type=True)
    return data


def decode(data: bytes, takes: Collection[type[m.Message]] | None = None) -> m.Message:
    """The message in one datagram; :class:`LinkProtocolError` naming what is wrong when it is none.
    ``takes``: the kinds this end receives (None: any), so a kind only this end sends is refused too."""
    try:
        d = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_refuse_ext)
    except Exception as e:  # msgpack's errors for a cut or corrupt datagram derive from several builtins
        raise LinkProtocolError(
            f"a link message of {len(data)} bytes that is not msgpack: {e}",
            expected="one msgpack map",
            received=f"{len(data)} bytes",
        ) from None
    if type(d) is not dict:
        raise LinkProtocolError(
            f"a link message must be a msgpack map naming its kind in 't', got {_shown(d)}",
            expected="a map",
            received=_shown(d),
        )
    name = d.get("t", _MISSING)
    kind = _BY_KIND.get(name) if type(name) is str else None
    if kind is None:
        known = ", ".join(_BY_KIND)
        got = "no kind" if name is _MISSING else f"kind {_shown(name)}"
        raise LinkProtocolError(
            f"a link message of {got}; this version knows {known}",
            kind=name if type(name) is str else None,
            field="t",
            expected=f"one of {known}",
            received="nothing" if name is _MISSING else _shown(name),
        )
    if takes is not None and kind.cls not in takes:
        own = ", ".join(m.KINDS[cls] for cls in takes)
        raise LinkProtocolError(
            f"a {kind.kind!r} message is {kind.sender}'s to send, and this end sent none: it takes {own}",
            kind=kind.kind,
            field="t",
            expected=f"one of {own}",
            received=repr(kind.kind),
        )
    if kind.check is not None:
        kind.check(d)
    try:
        message: m.Message = kind.decode(d)
    except _Wrong as e:
        raise kind.refusal(e) from None
    except Exception as e:  # a value no decoder here foresaw: refused like any other, never raised on
        raise LinkProtocolError(
            f"{kind.sender}'s {kind.kind!r} message cannot be read: {type(e).__name__}: {e}",
            kind=kind.kind,
            received=f"{type(e).__name__}: {e}",
        ) from None
    return message
