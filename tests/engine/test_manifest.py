"""Manifest parsing: every malformed field is named, with what was expected and what came."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from runtime.bundle.bundle import Bundle
from runtime.bundle.manifest import parse_manifest, read_manifest
from runtime.errors import BundleError, BundleFileNotFoundError

SHA = "0" * 64
GOOD: dict[str, Any] = {
    "format": "lerobot-runtime-bundle",
    "format_version": 1,
    "policy": {"name": "p"},
    "inputs": [
        {"name": "observation.images.front", "dtype": "uint8", "shape": [4, 4, 3], "role": "image"},
        {"name": "observation.state", "dtype": "float32", "shape": [6], "role": "state"},
    ],
    "outputs": [{"name": "action", "dtype": "float32", "shape": [10, 6], "role": "action"}],
    "action": {"output": "action", "chunk_length": 10, "names": ["a", "b", "c", "d", "e", "f"]},
    "control_rate_hz": 30,
    "programs": {
        "CPU": {"file": "p.pte", "precision": "f32", "sha256": SHA, "delegation": "full", "openvino_version": "x"}
    },
    "test_case": {"file": "t.npz", "sha256": SHA, "tolerance": {"f32": 1e-4}},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node: Any = data
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return data


_DELETE = object()


def test_good_manifest_round_trips() -> None:
    m = parse_manifest(GOOD)
    assert m.chunk_length == 10
    assert m.action_spec.shape == (10, 6)
    assert m.input("observation.state").role == "state"
    assert m.test_case.tolerance["f32"] == 1e-4
    assert m.test_case.tolerance["bf16"] == 0.075  # defaults fill the rest
    assert parse_manifest(json.loads(json.dumps(m.to_json()))) == m


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("format", "something-else", "field 'format'"),
        ("format_version", 2, "reads version 1, the bundle is version 2"),
        ("policy", _DELETE, "field 'policy': expected an object"),
        ("inputs.0.dtype", "float64", "field 'inputs[0].dtype': expected one of float32"),
        ("inputs.1.shape", [6, -1], "field 'inputs[1].shape': expected a list of positive integers"),
        ("inputs.1.name", "observation.images.front", "field 'inputs[1].name': expected a unique"),
        ("inputs.0.role", "camera", "field 'inputs[0].role': expected one of image, state"),
        ("action.output", "actions", "field 'action.output': expected one of the outputs (action)"),
        ("action.chunk_length", 20, "expected [chunk_length, len(action.names)] = [20, 6], got list [10, 6]"),
        ("action.names", ["a", "a", "c", "d", "e", "f"], "unique joint names"),
        ("control_rate_hz", 0, "field 'control_rate_hz': expected a positive number"),
        ("control_rate_hz", "30", "got str '30'"),
        ("programs.CPU.precision", "int4", "field 'programs.CPU.precision': expected one of f32, f16, bf16"),
        ("programs.CPU.file", "p.onnx", "ending in .pte"),
        ("programs.CPU.sha256", "abc", "field 'programs.CPU.sha256'"),
        ("test_case.tolerance", {"f32": -1}, "field 'test_case.tolerance.f32'"),
        ("programs", {"TPU": GOOD["programs"]["CPU"]}, "expected device keys among CPU, GPU, NPU, got str 'TPU'"),
    ],
)
def test_bad_field_is_named(path: str, value: Any, expected: str) -> None:
    with pytest.raises(BundleError) as err:
        parse_manifest(_with(path, value), "bundle/manifest.json")
    assert "bundle/manifest.json" in str(err.value)
    assert expected in str(err.value)


def test_missing_and_unreadable_manifest(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no manifest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        read_manifest(tmp_path)


def test_bundle_files_are_checked(bundle_copy: Path) -> None:
    Bundle.open(bundle_copy, verify_all=True)
    (bundle_copy / "test_case.npz").unlink()
    with pytest.raises(BundleFileNotFoundError, match=r"field 'test_case.file' names test_case.npz"):
        Bundle.open(bundle_copy)


def test_damaged_program_fails_its_checksum(bundle_copy: Path) -> None:
    pte = bundle_copy / "program_cpu.pte"
    data = bytearray(pte.read_bytes())
    data[-100] ^= 0xFF
    pte.write_bytes(bytes(data))
    bundle = Bundle.open(bundle_copy)  # only existence is checked on open
    with pytest.raises(
        BundleError, match=r"program_cpu.pte: sha256 .* does not match the manifest's programs.CPU.sha256"
    ):
        bundle.read_program("CPU")
    with pytest.raises(BundleError, match=r"programs\.CPU\.sha256"):
        bundle.map_program("CPU")  # the path the engines load from
    with pytest.raises(BundleError, match="does not match"):
        Bundle.open(bundle_copy, verify_all=True)


def test_file_names_cannot_escape_the_bundle(bundle_copy: Path) -> None:
    data = json.loads((bundle_copy / "manifest.json").read_text())
    data["test_case"]["file"] = "../../etc/passwd"
    (bundle_copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match="expected a file name inside the bundle"):
        Bundle.open(bundle_copy)
