"""The protocol's error codes and their exceptions: one class per code in docs/protocol.md's table,
each caught as the builtin its docstring names, an error reply turned back into the class of its code
(an unknown code kept, not lost), and the refusal of a body key a small request does not take."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.errors import LerobotRuntimeError
from runtime.protocol import errors
from runtime.protocol.errors import (
    ERROR_CLASSES,
    ERROR_CODES,
    BadRequestError,
    BusyError,
    ErrorInfo,
    ServerError,
    error_from_info,
    refuse_unexpected,
)

# docs/protocol.md, "Errors": every code a reply may carry, and the builtin a caller may catch it as
DOCUMENTED: dict[str, tuple[str, type[Exception]]] = {
    "bad_request": ("BadRequestError", ValueError),
    "bad_input": ("BadInputError", ValueError),
    "too_large": ("TooLargeError", ValueError),
    "unsupported_version": ("UnsupportedVersionError", ValueError),
    "unsupported_kind": ("UnsupportedKindError", ValueError),
    "busy": ("BusyError", TimeoutError),
    "superseded": ("SupersededError", TimeoutError),
    "inference_failed": ("InferenceFailedError", RuntimeError),
    "verification_failed": ("VerificationFailedError", RuntimeError),
    "unauthorized": ("UnauthorizedError", PermissionError),
    "shutting_down": ("ShuttingDownError", ConnectionError),
    "no_control": ("NoControlError", LookupError),
    "no_policy": ("NoPolicyError", LookupError),
    "control_refused": ("ControlRefusedError", RuntimeError),
    "session_held": ("SessionHeldError", PermissionError),
    "no_session": ("NoSessionError", PermissionError),
    "internal": ("InternalError", RuntimeError),
}


def test_error_info_goes_on_the_wire_with_every_key_and_nil_for_what_it_lacks() -> None:
    assert ErrorInfo("busy", "queue full").to_wire() == {
        "code": "busy",
        "message": "queue full",
        "field": None,
        "expected": None,
        "received": None,
    }
    full = ErrorInfo("bad_input", "input 'x': expected [6], got [5]", "x", "[6]", "[5]")
    assert full.to_wire() == {
        "code": "bad_input",
        "message": "input 'x': expected [6], got [5]",
        "field": "x",
        "expected": "[6]",
        "received": "[5]",
    }


def test_every_documented_code_has_its_class_and_no_other_code_exists() -> None:
    assert set(ERROR_CODES) == set(DOCUMENTED)
    assert len(ERROR_CODES) == len(DOCUMENTED)
    assert set(ERROR_CLASSES) == set(DOCUMENTED)
    for code, (name, _) in DOCUMENTED.items():
        cls = getattr(errors, name)
        assert ERROR_CLASSES[code] is cls
        assert cls.code == code


@pytest.mark.parametrize("code", sorted(DOCUMENTED))
def test_each_class_is_caught_as_its_builtin_and_as_a_server_error(code: str) -> None:
    name, builtin = DOCUMENTED[code]
    e = getattr(errors, name)("it went wrong", field="f")
    assert isinstance(e, builtin)
    assert isinstance(e, ServerError)
    assert isinstance(e, LerobotRuntimeError)
    assert e.code == code
    assert str(e) == f"[{code}] it went wrong"


def test_a_server_error_keeps_every_field_it_was_given() -> None:
    e = BusyError("queue full", field="queue", expected="room", received="4 of 4", request_id=17)
    assert (e.message, e.field, e.expected, e.received, e.request_id) == ("queue full", "queue", "room", "4 of 4", 17)
    assert e.args == ("queue full",)
    assert e.info == ErrorInfo("busy", "queue full", "queue", "room", "4 of 4")
    assert str(e) == "[busy] queue full"


def test_a_server_error_without_details_has_none_for_each() -> None:
    e = BadRequestError("not msgpack")
    assert (e.field, e.expected, e.received, e.request_id) == (None, None, None, None)
    assert e.info == ErrorInfo("bad_request", "not msgpack", None, None, None)


def test_the_plain_server_error_says_error_unless_given_a_code() -> None:
    assert ServerError("x").code == "error"
    assert str(ServerError("x")) == "[error] x"
    e = ServerError("later", code="rate_limited")
    assert e.code == "rate_limited" and str(e) == "[rate_limited] later"
    assert e.info.code == "rate_limited"
    # the code given to one error is that error's, not the class's
    assert ServerError.code == "error" and ServerError("y").code == "error"


@pytest.mark.parametrize("code", sorted(DOCUMENTED))
def test_an_error_reply_becomes_the_class_of_its_code(code: str) -> None:
    info = ErrorInfo(code, "why", "body.x", "an int", "str 'a'")
    e = error_from_info(info, 41)
    assert type(e) is getattr(errors, DOCUMENTED[code][0])
    assert (e.code, e.message, e.field, e.expected, e.received, e.request_id) == (
        code,
        "why",
        "body.x",
        "an int",
        "str 'a'",
        41,
    )
    assert e.info == info


def test_an_error_reply_without_a_request_id_has_none() -> None:
    e = error_from_info(ErrorInfo("busy", "queue full"))
    assert type(e) is BusyError and e.request_id is None
    assert (e.field, e.expected, e.received) == (None, None, None)


def test_an_error_reply_with_a_code_this_version_does_not_know_keeps_its_code() -> None:
    info = ErrorInfo("rate_limited", "slow down", "kind", "1 per second", "5")
    e = error_from_info(info, 3)
    assert type(e) is ServerError
    assert (e.code, e.message, e.field, e.expected, e.received, e.request_id) == (
        "rate_limited",
        "slow down",
        "kind",
        "1 per second",
        "5",
        3,
    )
    assert str(e) == "[rate_limited] slow down"
    assert e.info == info


def refusal(kind: str, body: dict[Any, Any], allowed: tuple[str, ...], data: list[bytes]) -> BadRequestError:
    with pytest.raises(BadRequestError) as caught:
        refuse_unexpected(kind, body, allowed, data)
    return caught.value


def test_a_body_of_allowed_keys_and_no_frames_passes() -> None:
    assert refuse_unexpected("teleop.close", {"session": "ab"}, ("session",), []) is None
    assert refuse_unexpected("ping", {}, (), []) is None
    # an allowed key need not be there
    assert refuse_unexpected("teleop.open", {}, ("who",), []) is None


def test_an_unknown_key_is_refused_naming_the_first_in_order_and_what_is_allowed() -> None:
    e = refusal("control.stop", {"who": "me", "zeta": 1, "beta": 2}, ("who", "reason"), [])
    assert e.message == "control.stop body: unknown key 'beta'"
    assert (e.field, e.expected, e.received) == ("body.beta", "reason, who", "beta")
    assert e.code == "bad_request"


def test_an_unknown_key_of_another_type_is_named_as_text() -> None:
    e = refusal("ping", {3: "x"}, (), [])
    assert e.message == "ping body: unknown key '3'"
    assert (e.field, e.expected, e.received) == ("body.3", "no body", "3")


def test_data_frames_are_refused_counting_them() -> None:
    e = refusal("stats", {}, (), [b"a", b"b"])
    assert e.message == "stats: takes no data frames"
    assert (e.field, e.expected, e.received) == ("(frames)", "no body", "2 data frames")
    e = refusal("teleop.close", {"session": "ab"}, ("session",), [b""])
    assert (e.message, e.expected, e.received) == ("teleop.close: takes no data frames", "session", "1 data frames")


def test_an_unknown_key_is_named_before_data_frames() -> None:
    e = refusal("ping", {"x": 1}, (), [b"a"])
    assert e.message == "ping body: unknown key 'x'"
    assert (e.field, e.received) == ("body.x", "x")
