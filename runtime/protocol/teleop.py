"""The ``teleop.*`` request bodies: which keys each kind takes and what each key must hold.

A station sends a target every control tick, so this stays small: plain msgpack numbers in a list
(six joints are 60 bytes; arrays in data frames would cost more than they save).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

from runtime.protocol.errors import BadRequestError, refuse_unexpected
from runtime.protocol.messages import TeleopRequest

MAX_TEXT: Final = 200
MAX_JOINTS: Final = 64
MAX_SEQ: Final = 2**63 - 1

# kind -> the body keys it takes (all required, except who)
_KEYS: Final[dict[str, frozenset[str]]] = {
    "teleop.open": frozenset({"who"}),
    "teleop.target": frozenset({"session", "seq", "positions"}),
    "teleop.take_over": frozenset({"session"}),
    "teleop.hand_back": frozenset({"session"}),
    "teleop.episode_start": frozenset({"session", "task"}),
    "teleop.episode_stop": frozenset({"session"}),
    "teleop.episode_discard": frozenset({"session"}),
    "teleop.close": frozenset({"session"}),
}
_OPTIONAL: Final = frozenset({"who"})


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(kind: str, key: str, expected: str, value: Any) -> BadRequestError:
    shown = "nothing" if value is _MISSING else f"{type(value).__name__} {_short(value)}"
    return BadRequestError(
        f"{kind} body.{key}: expected {expected}, got {shown}",
        field=f"body.{key}",
        expected=expected,
        received="nothing" if value is _MISSING else _short(value),
    )


_MISSING: Final = object()


def _text(kind: str, body: dict[Any, Any], key: str) -> str:
    value = body.get(key, "" if key in _OPTIONAL else _MISSING)
    if not isinstance(value, str) or len(value) > MAX_TEXT or (key not in _OPTIONAL and not value.strip()):
        raise _bad(kind, key, f"a non-empty string of at most {MAX_TEXT} characters", value)
    return value


def parse_teleop(rid: int, kind: str, body: dict[Any, Any], data: Sequence[Any]) -> TeleopRequest:
    allowed = _KEYS[kind]
    refuse_unexpected(kind, body, allowed, data)
    session = _text(kind, body, "session") if "session" in allowed else ""
    who = _text(kind, body, "who") if "who" in allowed else ""
    task = _text(kind, body, "task") if "task" in allowed else ""
    if kind != "teleop.target":
        return TeleopRequest(rid, kind, session=session, who=who, task=task)
    seq = body.get("seq", _MISSING)
    if type(seq) is not int or not 0 <= seq <= MAX_SEQ:
        raise _bad(kind, "seq", "an integer in [0, 2**63)", seq)
    raw = body.get("positions", _MISSING)
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_JOINTS:
        raise _bad(kind, "positions", f"a list of 1 to {MAX_JOINTS} numbers (one per joint)", raw)
    for i, v in enumerate(raw):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise _bad(kind, f"positions[{i}]", "a finite number", v)
    return TeleopRequest(rid, kind, session=session, seq=seq, positions=tuple(float(v) for v in raw))
