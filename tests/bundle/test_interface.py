"""The policy interface the control loop is built from: made from a manifest, carried as a map, refused by field."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.bundle.interface import PolicyInterface, parse_interface
from runtime.bundle.manifest import TensorSpec
from runtime.errors import BundleError

from .manifests import small_manifest

FACE = PolicyInterface(
    "act",
    (TensorSpec("state", "float32", (6,), "state"), TensorSpec("cam", "uint8", (48, 64, 3), "image")),
    ("a", "b", "c", "d", "e", "f"),
    50,
    30.0,
    2,
    50,
    "remote tcp://10.0.0.2:5555",
)


def test_it_travels_as_a_map_and_comes_back_equal() -> None:
    assert parse_interface(FACE.to_json(), "x") == FACE
    assert FACE.takes_prefix and not PolicyInterface("p", FACE.observation_inputs, ("a",), 1, 30.0).takes_prefix


def test_a_manifest_gives_what_a_client_sends() -> None:
    m = small_manifest()
    face = PolicyInterface.of_manifest(m, "bundle /b")
    assert face.observation_inputs == m.observation_inputs and face.action_names == tuple(m.action_names)
    assert (face.chunk_length, face.control_rate_hz, face.rtc_chunk_size, face.source) == (
        m.chunk_length,
        m.control_rate_hz,
        0,
        "bundle /b",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy_name": ""}, "field 'policy_name': expected the policy's name, got ''"),
        ({"observation_inputs": []}, "field 'observation_inputs': expected a non-empty list of inputs, got []"),
        ({"chunk_length": 0}, "field 'chunk_length': expected a positive integer, got 0"),
        ({"control_rate_hz": True}, "field 'control_rate_hz': expected a positive number of Hz, got True"),
        ({"rtc_chunk_size": -1}, "field 'rtc_chunk_size': expected 0 or more steps, got -1"),
        ({"action_names": ["a", ""]}, "field 'action_names': expected a non-empty list of joint names"),
    ],
)
def test_a_wrong_field_is_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(BundleError, match=r"^where: ") as e:
        parse_interface({**FACE.to_json(), **change}, "where")
    assert message in str(e.value)


def test_a_wrong_input_is_named_by_its_place() -> None:
    data = FACE.to_json()
    data["observation_inputs"][1]["dtype"] = "float64"
    with pytest.raises(BundleError, match=r"field 'observation_inputs\[1\].dtype': expected one of float32, "):
        parse_interface(data, "where")
