"""A policy's interface as the control loop sees it: what one observation holds, the joints a chunk
drives, the chunk's length, the control rate, how many frames the policy looks at, and whether it
continues a previous chunk (real-time chunking).

The loop needs this and nothing else of a policy: no programs, no test case, no tokenizer. It comes
from a bundle's manifest (:meth:`runtime.bundle.manifest.Manifest.interface`) when the policy runs in
this daemon, or from a remote server's ``hello`` when it runs on another machine; the arm process
gets it in its link's first message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.bundle.manifest import DTYPES, INPUT_ROLES, Manifest, TensorSpec
from runtime.errors import BundleError


@dataclass(frozen=True)
class PolicyInterface:
    policy_name: str
    #: one frame of each input a client sends (no noise, tokens or prefix: the server fills those)
    observation_inputs: tuple[TensorSpec, ...]
    action_names: tuple[str, ...]
    chunk_length: int
    control_rate_hz: float
    #: the frames the policy looks at (1: the newest alone)
    observation_history: int = 1
    #: the most leftover steps a request may carry for real-time chunking (0: the policy takes none)
    rtc_chunk_size: int = 0
    #: where the policy runs, for people: "bundle /path" or "remote tcp://host:port"
    source: str = ""

    @classmethod
    def of_manifest(cls, manifest: Manifest, source: str = "") -> PolicyInterface:
        """The interface of a bundle's policy (``source``: where the bundle is, for people)."""
        return cls(
            manifest.policy_name,
            manifest.observation_inputs,
            tuple(manifest.action_names),
            manifest.chunk_length,
            manifest.control_rate_hz,
            manifest.observation_history,
            manifest.rtc.chunk_size if manifest.rtc is not None else 0,
            source,
        )

    @property
    def takes_prefix(self) -> bool:
        return self.rtc_chunk_size > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "policy_name": self.policy_name,
            "observation_inputs": [s.to_json() for s in self.observation_inputs],
            "action_names": list(self.action_names),
            "chunk_length": self.chunk_length,
            "control_rate_hz": self.control_rate_hz,
            "observation_history": self.observation_history,
            "rtc_chunk_size": self.rtc_chunk_size,
            "source": self.source,
        }


def parse_interface(data: Any, where: str) -> PolicyInterface:
    """Validate a decoded :meth:`PolicyInterface.to_json` map; BundleError names ``where`` and the field."""

    def fail(name: str, expected: str, got: Any) -> BundleError:
        return BundleError(f"{where}: field {name!r}: expected {expected}, got {got!r}")

    if not isinstance(data, Mapping):
        raise fail("(top level)", "a map", data)
    name = data.get("policy_name")
    if not isinstance(name, str) or not name:
        raise fail("policy_name", "the policy's name", name)
    raw = data.get("observation_inputs")
    if not isinstance(raw, list) or not raw:
        raise fail("observation_inputs", "a non-empty list of inputs", raw)
    inputs = tuple(_spec(s, f"observation_inputs[{i}]", fail) for i, s in enumerate(raw))
    names = data.get("action_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise fail("action_names", "a non-empty list of joint names", names)
    chunk = data.get("chunk_length")
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise fail("chunk_length", "a positive integer", chunk)
    rate = data.get("control_rate_hz")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0:
        raise fail("control_rate_hz", "a positive number of Hz", rate)
    history = data.get("observation_history", 1)
    if not isinstance(history, int) or isinstance(history, bool) or history < 1:
        raise fail("observation_history", "a positive integer", history)
    rtc = data.get("rtc_chunk_size", 0)
    if not isinstance(rtc, int) or isinstance(rtc, bool) or rtc < 0:
        raise fail("rtc_chunk_size", "0 or more steps", rtc)
    source = data.get("source", "")
    if not isinstance(source, str):
        raise fail("source", "a string", source)
    return PolicyInterface(name, inputs, tuple(names), chunk, float(rate), history, rtc, source)


def _spec(raw: Any, field: str, fail: Any) -> TensorSpec:
    if not isinstance(raw, Mapping):
        raise fail(field, "a map with name, dtype, shape, role", raw)
    name, dtype, shape, role = raw.get("name"), raw.get("dtype"), raw.get("shape"), raw.get("role", "other")
    if not isinstance(name, str) or not name:
        raise fail(f"{field}.name", "the input's name", name)
    if dtype not in DTYPES:
        raise fail(f"{field}.dtype", f"one of {', '.join(DTYPES)}", dtype)
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise fail(f"{field}.shape", "a list of positive dimensions", shape)
    if role not in INPUT_ROLES:
        raise fail(f"{field}.role", f"one of {', '.join(INPUT_ROLES)}", role)
    return TensorSpec(name, dtype, tuple(shape), role)
