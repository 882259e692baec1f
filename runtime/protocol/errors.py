"""Error codes of the wire protocol and the exceptions that mirror them.

An error is a reply, never a disconnect: the server answers with a code from :data:`ERROR_CODES` and a
message naming the field, the expected and the received value. The client turns that reply back into
the subclass of :class:`ServerError` registered for the code, so callers can catch ``BusyError`` or
the builtin it also derives from (``ValueError`` for bad requests, ``TimeoutError`` for busy...).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sized
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from runtime.errors import LerobotRuntimeError


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """The ``error`` map of a reply."""

    code: str
    message: str
    field: str | None = None
    expected: str | None = None
    received: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "field": self.field,
            "expected": self.expected,
            "received": self.received,
        }


class ServerError(LerobotRuntimeError):
    """An error the server reported (or, server-side, one about to be reported) for one request."""

    code: ClassVar[str] = "error"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        expected: str | None = None,
        received: str | None = None,
        request_id: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.expected = expected
        self.received = received
        self.request_id = request_id
        if code is not None:
            # Only for codes this version does not know: keeps the server's own code visible.
            self.code = code  # type: ignore[misc]

    @property
    def info(self) -> ErrorInfo:
        return ErrorInfo(self.code, self.message, self.field, self.expected, self.received)

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class BadRequestError(ServerError, ValueError):
    """The message is not a well-formed request (not msgpack, missing or mistyped field, bad array)."""

    code = "bad_request"


def refuse_unexpected(kind: str, body: Mapping[Any, Any], allowed: Collection[str], data: Sized) -> None:
    """Refuse a body key outside ``allowed`` (the first, sorted) or any data frame, for a request
    ``kind`` that carries only a small map."""
    unknown = set(body) - set(allowed)
    if not unknown and not len(data):
        return
    key = sorted(map(str, unknown))[0] if unknown else "(frames)"
    raise BadRequestError(
        f"{kind} body: unknown key {key!r}" if unknown else f"{kind}: takes no data frames",
        field=f"body.{key}" if unknown else "(frames)",
        expected=", ".join(sorted(allowed)) or "no body",
        received=key if unknown else f"{len(data)} data frames",
    )


class BadInputError(ServerError, ValueError):
    """The observation does not match the policy's inputs (missing/extra key, dtype, shape)."""

    code = "bad_input"


class TooLargeError(ServerError, ValueError):
    """The message is larger than the server's ``max_message_bytes``."""

    code = "too_large"


class UnsupportedVersionError(ServerError, ValueError):
    """The request's protocol version is not one this server speaks."""

    code = "unsupported_version"


class UnsupportedKindError(ServerError, ValueError):
    """The request's kind is unknown to this server (or reserved for a later version)."""

    code = "unsupported_kind"


class BusyError(ServerError, TimeoutError):
    """The inference queue is full; retry with the next observation."""

    code = "busy"


class SupersededError(ServerError, TimeoutError):
    """A newer observation from the same client replaced this one in the queue (latest wins)."""

    code = "superseded"


class InferenceFailedError(ServerError, RuntimeError):
    """The engine failed on a valid observation; the message carries the backend's reason."""

    code = "inference_failed"


class VerificationFailedError(ServerError, RuntimeError):
    """The serving canary caught the engine returning wrong numbers; no chunk is served until a reload."""

    code = "verification_failed"


class UnauthorizedError(ServerError, PermissionError):
    """The client's key is not allowed (CURVE handshake refused, or the kind needs another key)."""

    code = "unauthorized"


class ShuttingDownError(ServerError, ConnectionError):
    """The server is stopping and did not run this request."""

    code = "shutting_down"


class NoControlError(ServerError, LookupError):
    """A ``control.*`` request to a daemon that does not own an arm (or runs without its control loop)."""

    code = "no_control"


class NoPolicyError(ServerError, LookupError):
    """An ``infer`` to a daemon whose loop's policy runs on another machine (``[policy] endpoint``)."""

    code = "no_policy"


class ControlRefusedError(ServerError, RuntimeError):
    """A ``control.*`` request that cannot be carried out now (e-stop latched, stale stream...)."""

    code = "control_refused"


class SessionHeldError(ServerError, PermissionError):
    """``teleop.open`` while another station holds the arm; the message names the holder."""

    code = "session_held"


class NoSessionError(ServerError, PermissionError):
    """A ``teleop.*`` request whose session is not the open one (closed, lost, or never opened)."""

    code = "no_session"


class InternalError(ServerError, RuntimeError):
    """A bug in the server; the request may be retried, the log has the traceback."""

    code = "internal"


ERROR_CLASSES: Final[dict[str, type[ServerError]]] = {
    cls.code: cls
    for cls in (
        BadRequestError,
        BadInputError,
        TooLargeError,
        UnsupportedVersionError,
        UnsupportedKindError,
        BusyError,
        SupersededError,
        InferenceFailedError,
        VerificationFailedError,
        UnauthorizedError,
        ShuttingDownError,
        NoControlError,
        NoPolicyError,
        ControlRefusedError,
        SessionHeldError,
        NoSessionError,
        InternalError,
    )
}
ERROR_CODES: Final[tuple[str, ...]] = tuple(ERROR_CLASSES)


def error_from_info(info: ErrorInfo, request_id: int | None = None) -> ServerError:
    """The exception for a decoded error reply; unknown codes give a plain :class:`ServerError`."""
    cls = ERROR_CLASSES.get(info.code)
    kwargs: dict[str, Any] = {
        "field": info.field,
        "expected": info.expected,
        "received": info.received,
        "request_id": request_id,
    }
    if cls is None:
        return ServerError(info.message, code=info.code, **kwargs)
    return cls(info.message, **kwargs)
