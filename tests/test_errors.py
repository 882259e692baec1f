"""The project's exceptions: each caught as the builtin a caller expects, carrying the fields it names."""

from __future__ import annotations

import pytest

from drivers import errors as driver_errors
from runtime import errors
from runtime.versions import package_version


@pytest.mark.parametrize(
    ("cls", "builtins"),
    [
        (errors.BundleError, (ValueError,)),
        (errors.BundleFileNotFoundError, (errors.BundleError, ValueError, FileNotFoundError)),
        (errors.DeviceError, (RuntimeError,)),
        (errors.InputValidationError, (ValueError,)),
        (errors.InferenceError, (RuntimeError,)),
        (errors.ParityError, (RuntimeError,)),
        (errors.ExportError, (RuntimeError,)),
        (errors.InstanceRunningError, (RuntimeError,)),
        (errors.MissingDependencyError, (ImportError,)),
        (errors.RecordingError, (RuntimeError,)),
        (errors.RecordingInputError, (errors.RecordingError, RuntimeError, ValueError)),
        (errors.LinkProtocolError, (ValueError,)),
        (errors.LinkVersionError, (errors.LinkProtocolError, ValueError)),
    ],
)
def test_each_error_is_the_projects_and_the_builtin_a_caller_catches(
    cls: type[Exception], builtins: tuple[type[Exception], ...]
) -> None:
    assert issubclass(cls, errors.LerobotRuntimeError)
    for b in builtins:
        assert issubclass(cls, b)


def test_the_base_and_config_error_are_the_drivers_own() -> None:
    assert errors.LerobotRuntimeError is driver_errors.LerobotRuntimeError
    assert errors.ConfigError is driver_errors.ConfigError


def test_an_input_error_names_the_field_what_was_expected_and_what_came() -> None:
    e = errors.InputValidationError("bad state", field="observation.state", expected="(6,)", received="(5,)")
    assert str(e) == "bad state"
    assert (e.field, e.expected, e.received) == ("observation.state", "(6,)", "(5,)")
    bare = errors.InputValidationError("no details")
    assert str(bare) == "no details"
    assert (bare.field, bare.expected, bare.received) == (None, None, None)


def test_an_inference_error_carries_the_backends_reason() -> None:
    e = errors.InferenceError("infer failed", backend_reason="out of memory")
    assert str(e) == "infer failed"
    assert e.backend_reason == "out of memory"
    bare = errors.InferenceError("infer failed")
    assert bare.backend_reason is None


def test_a_recording_input_error_names_the_column() -> None:
    e = errors.RecordingInputError(
        "frame refused", field="observation.images.front", expected="(480, 640, 3)", received="(480, 640)"
    )
    assert str(e) == "frame refused"
    assert (e.field, e.expected, e.received) == ("observation.images.front", "(480, 640, 3)", "(480, 640)")


def test_a_link_protocol_error_names_the_kind_the_field_what_was_expected_and_what_came() -> None:
    e = errors.LinkProtocolError("bad tick", kind="tick", field="snapshot.tick", expected="an integer", received="1.5")
    assert str(e) == "bad tick"
    assert (e.kind, e.field, e.expected, e.received) == ("tick", "snapshot.tick", "an integer", "1.5")
    bare = errors.LinkProtocolError("not msgpack")
    assert (bare.kind, bare.field, bare.expected, bare.received) == (None, None, None, None)


def test_package_version_is_the_installed_one_or_says_not_installed() -> None:
    import numpy

    assert package_version("numpy") == numpy.__version__
    assert package_version("no-such-distribution-lerobot-runtime") == "not installed"
