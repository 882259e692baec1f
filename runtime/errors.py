"""The project's exceptions.

One base class, :class:`LerobotRuntimeError`; every leaf also subclasses the builtin a caller would
naturally catch (``ValueError`` for bad input, ``FileNotFoundError`` for a missing file...).
Messages name the thing that is wrong, what was expected and what came, and the next thing to check.
"""

from __future__ import annotations

# The base and the configuration error live with the lowest layer (drivers never imports runtime)
from drivers.errors import ConfigError as ConfigError
from drivers.errors import LerobotRuntimeError as LerobotRuntimeError


class BundleError(LerobotRuntimeError, ValueError):
    """A policy bundle is malformed: names the file and the field."""


class BundleFileNotFoundError(BundleError, FileNotFoundError):
    """A file the bundle manifest names does not exist."""


class DeviceError(LerobotRuntimeError, RuntimeError):
    """A requested inference device is not present, or the bundle has no program for it."""


class InputValidationError(LerobotRuntimeError, ValueError):
    """An observation does not match the policy's declared inputs.

    ``field`` is the input's name; ``expected`` and ``received`` say what was wanted and what came.
    """

    def __init__(
        self, message: str, *, field: str | None = None, expected: str | None = None, received: str | None = None
    ) -> None:
        super().__init__(message)
        self.field = field
        self.expected = expected
        self.received = received


class InferenceError(LerobotRuntimeError, RuntimeError):
    """Executing the policy failed; carries the backend's own reason when there is one."""

    def __init__(self, message: str, *, backend_reason: str | None = None) -> None:
        super().__init__(message)
        self.backend_reason = backend_reason


class ParityError(LerobotRuntimeError, RuntimeError):
    """The program's outputs do not match the bundle's reference test case within tolerance."""


class ExportError(LerobotRuntimeError, RuntimeError):
    """Exporting or lowering a policy failed."""


class InstanceRunningError(LerobotRuntimeError, RuntimeError):
    """Another daemon already serves one of the configured endpoints (names its PID)."""


class MissingDependencyError(LerobotRuntimeError, ImportError):
    """An optional dependency is needed for this operation; the message says what to install."""


class RecordingError(LerobotRuntimeError, RuntimeError):
    """Recording an episode failed, or the recorder was used out of order (names the state it was in)."""


class RecordingInputError(RecordingError, ValueError):
    """A frame handed to the recorder does not match the features it was built with.

    ``field`` is the column (``observation.state``, ``observation.images.front``...); ``expected`` and
    ``received`` say what was wanted and what came.
    """

    def __init__(self, message: str, *, field: str, expected: str, received: str) -> None:
        super().__init__(message)
        self.field = field
        self.expected = expected
        self.received = received


class LinkProtocolError(LerobotRuntimeError, ValueError):
    """A message on the link between the daemon and the arm process that this side cannot take.

    ``kind`` is the message's kind (None when it names none), ``field`` the field at fault (``t`` for
    the kind itself), ``expected`` and ``received`` what was wanted and what came. The side that
    receives one refuses that message, counts and logs it, and goes on with the next.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str | None = None,
        field: str | None = None,
        expected: str | None = None,
        received: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.field = field
        self.expected = expected
        self.received = received


class LinkVersionError(LinkProtocolError):
    """The daemon speaks another version of the link's protocol than the arm process: ``expected`` is
    the arm process's version, ``received`` the daemon's (the message names both)."""
