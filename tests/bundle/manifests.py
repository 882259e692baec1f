"""A small valid manifest made in code, for tests that need one without exporting a bundle."""

from __future__ import annotations

from typing import Any

from runtime.bundle.manifest import Manifest, ProgramEntry, TensorSpec, TestCaseEntry


def small_manifest(
    policy_name: str = "stand-in",
    inputs: tuple[TensorSpec, ...] = (TensorSpec("observation.state", "float32", (3,), "state"),),
    **fields: Any,
) -> Manifest:
    """Three joints, a chunk of two, one f32 CPU program; ``fields`` replace any other field."""
    zeros = "0" * 64
    values: dict[str, Any] = {
        "policy_name": policy_name,
        "inputs": inputs,
        "outputs": (TensorSpec("action", "float32", (2, 3), "action"),),
        "action_output": "action",
        "chunk_length": 2,
        "action_names": ("a", "b", "c"),
        "control_rate_hz": 30.0,
        "programs": {"CPU": ProgramEntry("CPU", "p.pte", "f32", zeros, "full", "")},
        "test_case": TestCaseEntry("test_case.npz", zeros),
        **fields,
    }
    return Manifest(**values)
