"""Parsing ``manifest.json``: every field's refusal word for word, defaults, and what is written back.

The manifests are dicts made here (no export): each refusal names the file and the field, with what
was expected and what came (``nothing`` for a missing field, the type and value otherwise).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from runtime.bundle.manifest import (
    DEFAULT_TOLERANCE,
    FileEntry,
    LanguageEntry,
    Manifest,
    ProgramEntry,
    RtcEntry,
    TensorSpec,
    TestCaseEntry,
    parse_manifest,
    read_manifest,
)
from runtime.errors import BundleError

SHA = "0123456789abcdef" * 4
DTYPES = "float32, float16, uint8, int8, int32, int64, bool"
INPUT_ROLES = "image, state, env, other, noise, language, prefix, prefix_weights, guidance"
GOOD: dict[str, Any] = {
    "format": "lerobot-runtime-bundle",
    "format_version": 1,
    "policy": {"name": "p"},
    "inputs": [
        {"name": "observation.images.front", "dtype": "uint8", "shape": [4, 4, 3], "role": "image"},
        {"name": "observation.state", "dtype": "float32", "shape": [6], "role": "state"},
    ],
    "outputs": [
        {"name": "value", "dtype": "float32", "shape": [1], "role": "other"},
        {"name": "action", "dtype": "float32", "shape": [10, 6], "role": "action"},
    ],
    "action": {"output": "action", "chunk_length": 10, "names": ["a", "b", "c", "d", "e", "f"]},
    "control_rate_hz": 30,
    "programs": {
        "CPU": {"file": "p.pte", "precision": "f32", "sha256": SHA, "delegation": "full", "openvino_version": "x"}
    },
    "test_case": {"file": "t.npz", "sha256": SHA, "tolerance": {"f32": 1e-4}},
}
_DELETE = object()


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of ``base`` with dotted paths (``__`` for ``.``) set, or deleted with ``_DELETE``."""
    data = copy.deepcopy(base)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node: Any = data
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        key: Any = int(last) if last.isdigit() else last
        if value is _DELETE:
            del node[key]
        else:
            node[key] = value
    return data


def _refusal(data: Any) -> str:
    with pytest.raises(BundleError) as e:
        parse_manifest(data, "m.json")
    return str(e.value)


def _field(where: str, expected: str, got: str) -> str:
    return f"m.json: field '{where}': expected {expected}, got {got}"


# (changes to GOOD, field, expected, got): one refusal each, whole
REFUSALS: list[tuple[dict[str, Any], str, str, str]] = [
    ({"format": _DELETE}, "format", "'lerobot-runtime-bundle'", "nothing"),
    ({"format": 1}, "format", "'lerobot-runtime-bundle'", "int 1"),
    ({"format": "other"}, "format", "'lerobot-runtime-bundle'", "str 'other'"),
    ({"format_version": _DELETE}, "format_version", "format version 1", "nothing"),
    ({"format_version": True}, "format_version", "format version 1", "bool True"),
    ({"format_version": 1.0}, "format_version", "format version 1", "float 1.0"),
    ({"policy": _DELETE}, "policy", "an object with the policy's name", "nothing"),
    ({"policy": "p"}, "policy", "an object with the policy's name", "str 'p'"),
    ({"policy__name": _DELETE}, "policy.name", "the policy name", "nothing"),
    ({"policy__description": 3}, "policy.description", "a string", "int 3"),
    ({"inputs": _DELETE}, "inputs", "a non-empty list of tensors", "nothing"),
    ({"inputs": []}, "inputs", "a non-empty list of tensors", "list []"),
    ({"outputs": {}}, "outputs", "a non-empty list of tensors", "dict {}"),
    ({"outputs": _DELETE}, "outputs", "a non-empty list of tensors", "nothing"),
    ({"inputs__0": "x"}, "inputs[0]", "an object with name, dtype, shape, role", "str 'x'"),
    ({"inputs__0__name": _DELETE}, "inputs[0].name", "a tensor name", "nothing"),
    ({"inputs__0__name": ""}, "inputs[0].name", "a unique, non-empty name", "str ''"),
    (
        {"inputs__1__name": "observation.images.front"},
        "inputs[1].name",
        "a unique, non-empty name",
        "str 'observation.images.front'",
    ),
    ({"inputs__0__dtype": _DELETE}, "inputs[0].dtype", f"one of {DTYPES}", "nothing"),
    ({"inputs__0__dtype": "float64"}, "inputs[0].dtype", f"one of {DTYPES}", "str 'float64'"),
    ({"inputs__1__shape": _DELETE}, "inputs[1].shape", "a list of positive integers", "nothing"),
    ({"inputs__1__shape": "6"}, "inputs[1].shape", "a list of positive integers", "str '6'"),
    ({"inputs__1__shape": [6, 0]}, "inputs[1].shape", "a list of positive integers (static shapes)", "list [6, 0]"),
    ({"inputs__1__shape": [-6]}, "inputs[1].shape", "a list of positive integers (static shapes)", "list [-6]"),
    ({"inputs__1__shape": [True]}, "inputs[1].shape", "a list of positive integers (static shapes)", "list [True]"),
    ({"inputs__1__shape": [6.0]}, "inputs[1].shape", "a list of positive integers (static shapes)", "list [6.0]"),
    ({"inputs__0__role": "camera"}, "inputs[0].role", f"one of {INPUT_ROLES}", "str 'camera'"),
    ({"inputs__0__role": 3}, "inputs[0].role", f"one of {INPUT_ROLES}", "int 3"),
    ({"outputs__1__role": "image"}, "outputs[1].role", "one of action, other", "str 'image'"),
    ({"action": _DELETE}, "action", "an object with output, chunk_length, names", "nothing"),
    ({"action__output": _DELETE}, "action.output", "the name of the action output", "nothing"),
    ({"action__output": "actions"}, "action.output", "one of the outputs (value, action)", "str 'actions'"),
    ({"action__chunk_length": _DELETE}, "action.chunk_length", "a positive integer", "nothing"),
    ({"action__chunk_length": "10"}, "action.chunk_length", "a positive integer", "str '10'"),
    ({"action__names": _DELETE}, "action.names", "a list of joint names", "nothing"),
    ({"action__names": []}, "action.names", "a non-empty list of unique joint names", "list []"),
    (
        {"action__names": ["a", "b", "c", "d", "e", ""]},
        "action.names",
        "a non-empty list of unique joint names",
        "list ['a', 'b', 'c', 'd', 'e', '']",
    ),
    (
        {"action__names": ["a", "b", "c", "d", "e", 6]},
        "action.names",
        "a non-empty list of unique joint names",
        "list ['a', 'b', 'c', 'd', 'e', 6]",
    ),
    (
        {"action__names": ["a", "b", "c", "d", "e", "a"]},
        "action.names",
        "a non-empty list of unique joint names",
        "list ['a', 'b', 'c', 'd', 'e', 'a']",
    ),
    (
        {"action__chunk_length": 20},
        "outputs[1].shape",
        "[chunk_length, len(action.names)] = [20, 6]",
        "list [10, 6]",
    ),
    (
        {"action__names": ["a", "b", "c", "d", "e"]},
        "outputs[1].shape",
        "[chunk_length, len(action.names)] = [10, 5]",
        "list [10, 6]",
    ),
    ({"control_rate_hz": _DELETE}, "control_rate_hz", "a positive number of Hz", "nothing"),
    ({"control_rate_hz": 0}, "control_rate_hz", "a positive number of Hz", "int 0"),
    ({"control_rate_hz": -30.0}, "control_rate_hz", "a positive number of Hz", "float -30.0"),
    ({"control_rate_hz": math.nan}, "control_rate_hz", "a positive number of Hz", "float nan"),
    ({"control_rate_hz": math.inf}, "control_rate_hz", "a positive number of Hz", "float inf"),
    ({"control_rate_hz": "30"}, "control_rate_hz", "a positive number of Hz", "str '30'"),
    ({"control_rate_hz": True}, "control_rate_hz", "a positive number of Hz", "bool True"),
    ({"programs": _DELETE}, "programs", "an object mapping device to program", "nothing"),
    ({"programs": {}}, "programs", "at least one program for one of CPU, GPU, NPU", "dict {}"),
    ({"programs__TPU": GOOD["programs"]["CPU"]}, "programs", "device keys among CPU, GPU, NPU", "str 'TPU'"),
    ({"programs__GPU": "p.pte"}, "programs.GPU", "an object with file, precision, sha256", "str 'p.pte'"),
    ({"programs__CPU__file": _DELETE}, "programs.CPU.file", "a .pte file name", "nothing"),
    ({"programs__CPU__file": "p.onnx"}, "programs.CPU.file", "a file name ending in .pte", "str 'p.onnx'"),
    ({"programs__CPU__precision": _DELETE}, "programs.CPU.precision", "one of f32, f16, bf16, int8", "nothing"),
    ({"programs__CPU__precision": "int4"}, "programs.CPU.precision", "one of f32, f16, bf16, int8", "str 'int4'"),
    ({"programs__CPU__delegation": _DELETE}, "programs.CPU.delegation", "'full' or 'partial'", "nothing"),
    ({"programs__CPU__delegation": "some"}, "programs.CPU.delegation", "'full' or 'partial'", "str 'some'"),
    ({"programs__CPU__openvino_version": 3}, "programs.CPU.openvino_version", "a version string", "int 3"),
    ({"programs__CPU__sha256": _DELETE}, "programs.CPU.sha256", "a 64-character hex sha256", "nothing"),
    (
        {"programs__CPU__sha256": "abc"},
        "programs.CPU.sha256",
        "a 64-character lowercase hex sha256",
        "str 'abc'",
    ),
    (
        {"programs__CPU__sha256": SHA.upper()},
        "programs.CPU.sha256",
        "a 64-character lowercase hex sha256",
        f"str {SHA.upper()!r}",
    ),
    (
        {"programs__CPU__sha256": "g" + SHA[1:]},
        "programs.CPU.sha256",
        "a 64-character lowercase hex sha256",
        f"str {'g' + SHA[1:]!r}",
    ),
    (
        {"programs__CPU__sha256": "X" + SHA[1:]},
        "programs.CPU.sha256",
        "a 64-character lowercase hex sha256",
        f"str {'X' + SHA[1:]!r}",
    ),
    (
        {"programs__CPU__sha256": SHA + "0"},
        "programs.CPU.sha256",
        "a 64-character lowercase hex sha256",
        f"str {SHA + '0'!r}",
    ),
    (
        {"programs__CPU__sha256": SHA[:-1]},
        "programs.CPU.sha256",
        "a 64-character lowercase hex sha256",
        f"str {SHA[:-1]!r}",
    ),
    ({"test_case": _DELETE}, "test_case", "an object with file, sha256, tolerance", "nothing"),
    ({"test_case__file": _DELETE}, "test_case.file", "an .npz file name", "nothing"),
    ({"test_case__sha256": "x"}, "test_case.sha256", "a 64-character lowercase hex sha256", "str 'x'"),
    (
        {"test_case__tolerance": "x"},
        "test_case.tolerance",
        "an object of precision -> max abs error",
        "str 'x'",
    ),
    *(
        (
            {"test_case__tolerance": {prec: tol}},
            f"test_case.tolerance.{prec}",
            "a non-negative number for one of f32, f16, bf16, int8",
            got,
        )
        for prec, tol, got in (
            ("f32", -1, "int -1"),
            ("f32", -1e-9, "float -1e-09"),
            ("f32", True, "bool True"),
            ("f32", "1", "str '1'"),
            ("f32", math.nan, "float nan"),
            ("f64", 1, "int 1"),
        )
    ),
    (
        {"test_case__scale": "x"},
        "test_case.scale",
        "an object of output -> list of positive numbers",
        "str 'x'",
    ),
    (
        {"test_case__scale": {"nope": [1]}},
        "test_case.scale.nope",
        "the name of an output (value, action)",
        "str 'nope'",
    ),
    *(
        (
            {"test_case__scale": {"action": values}},
            "test_case.scale.action",
            "6 positive numbers (one per element of the last axis)",
            got,
        )
        for values, got in (
            ([1, 2, 3], "list [1, 2, 3]"),
            ([1, 2, 3, 4, 5, 6, 7], "list [1, 2, 3, 4, 5, 6, 7]"),
            ([1, 2, 3, 4, 5, 0], "list [1, 2, 3, 4, 5, 0]"),
            ([1, 2, 3, 4, 5, -1.0], "list [1, 2, 3, 4, 5, -1.0]"),
            ([1, 2, 3, 4, 5, True], "list [1, 2, 3, 4, 5, True]"),
            ([1, 2, 3, 4, 5, "6"], "list [1, 2, 3, 4, 5, '6']"),
            ([1, 2, 3, 4, 5, math.inf], "list [1, 2, 3, 4, 5, inf]"),
            ([1, 2, 3, 4, 5, math.nan], "list [1, 2, 3, 4, 5, nan]"),
            ((1, 2, 3, 4, 5, 6), "tuple (1, 2, 3, 4, 5, 6)"),
        )
    ),
    (
        {"test_case__scale": {"value": [1, 2]}},
        "test_case.scale.value",
        "1 positive numbers (one per element of the last axis)",
        "list [1, 2]",
    ),
    ({"test_case__scale_source": 3}, "test_case.scale_source", "a string", "int 3"),
    ({"portable_program": "x"}, "portable_program", "an object with file and sha256", "str 'x'"),
    ({"portable_program": {"sha256": SHA}}, "portable_program.file", "a .pt2 file name", "nothing"),
    ({"portable_program": {"file": "p.pt2"}}, "portable_program.sha256", "a 64-character hex sha256", "nothing"),
    ({"source": "x"}, "source", "an object describing where the policy came from", "str 'x'"),
    (
        {"model_batch": 2},
        "model_batch",
        "0 (no batch dimension) or 1 (a batch of one, removed in the graph)",
        "int 2",
    ),
    (
        {"model_batch": -1},
        "model_batch",
        "0 (no batch dimension) or 1 (a batch of one, removed in the graph)",
        "int -1",
    ),
    ({"model_batch": "1"}, "model_batch", "0 or 1", "str '1'"),
    ({"model_batch": True}, "model_batch", "0 or 1", "bool True"),
    ({"observation_history": 0}, "observation_history", "a positive number of frames", "int 0"),
    ({"observation_history": "2"}, "observation_history", "a positive number of frames", "str '2'"),
    ({"quantization": "x"}, "quantization", "an object describing the quantisation", "str 'x'"),
    ({"tools": "x"}, "tools", "an object of tool -> version", "str 'x'"),
    ({"tools": {"a": "1", "b": 2}}, "tools", "an object of tool name -> version string", "dict {'a': '1', 'b': 2}"),
    ({"created_utc": 3}, "created_utc", "an ISO-8601 time", "int 3"),
]


@pytest.mark.parametrize(("changes", "where", "expected", "got"), REFUSALS)
def test_each_bad_field_is_refused_naming_the_file_the_field_what_was_expected_and_what_came(
    changes: dict[str, Any], where: str, expected: str, got: str
) -> None:
    assert _refusal(_with(GOOD, **changes)) == _field(where, expected, got)


def test_not_an_object_is_refused_at_the_top_level() -> None:
    assert _refusal([GOOD]) == _field("(top level)", "a JSON object", f"list {[GOOD]!r}")
    assert _refusal(None) == _field("(top level)", "a JSON object", "NoneType None")


def test_another_format_version_is_refused_saying_what_to_do() -> None:
    assert _refusal(_with(GOOD, format_version=2)) == (
        "m.json: field 'format_version': this lerobot-runtime reads version 1, the bundle is version 2; "
        "re-export the bundle or upgrade lerobot-runtime"
    )


def test_the_default_file_name_in_a_refusal() -> None:
    with pytest.raises(BundleError) as e:
        parse_manifest(_with(GOOD, format=_DELETE))
    assert str(e.value) == "manifest.json: field 'format': expected 'lerobot-runtime-bundle', got nothing"


def test_the_first_bad_field_in_order_is_the_one_named() -> None:
    assert _refusal(_with(GOOD, inputs__1__dtype="x", inputs__1__shape=[0])) == _field(
        "inputs[1].dtype", f"one of {DTYPES}", "str 'x'"
    )


def test_a_minimal_manifest_gets_every_default() -> None:
    m = parse_manifest(GOOD, "m.json")
    assert m == Manifest(
        policy_name="p",
        inputs=(
            TensorSpec("observation.images.front", "uint8", (4, 4, 3), "image"),
            TensorSpec("observation.state", "float32", (6,), "state"),
        ),
        outputs=(TensorSpec("value", "float32", (1,), "other"), TensorSpec("action", "float32", (10, 6), "action")),
        action_output="action",
        chunk_length=10,
        action_names=("a", "b", "c", "d", "e", "f"),
        control_rate_hz=30.0,
        programs={"CPU": ProgramEntry("CPU", "p.pte", "f32", SHA, "full", "x")},
        test_case=TestCaseEntry("t.npz", SHA, {**DEFAULT_TOLERANCE, "f32": 1e-4}, {}, "absolute"),
    )
    assert type(m.control_rate_hz) is float
    assert (m.description, m.created_utc, m.tools, m.source, m.quantization) == ("", "", {}, {}, {})
    assert (m.portable_program, m.language, m.rtc, m.model_batch, m.observation_history) == (None, None, None, 0, 1)
    assert m.format_version == 1


def test_default_tolerances_and_a_tolerance_of_zero() -> None:
    assert DEFAULT_TOLERANCE == {"f32": 2e-5, "f16": 0.075, "bf16": 0.075, "int8": 0.15}
    m = parse_manifest(_with(GOOD, test_case__tolerance={"f16": 0, "int8": 1}))
    assert m.test_case.tolerance == {"f32": 2e-5, "f16": 0.0, "bf16": 0.075, "int8": 1.0}
    assert type(m.test_case.tolerance["int8"]) is float
    assert parse_manifest(_with(GOOD, test_case__tolerance=_DELETE)).test_case.tolerance == DEFAULT_TOLERANCE


def test_a_rate_below_one_hz_is_a_rate() -> None:
    assert parse_manifest(_with(GOOD, control_rate_hz=0.5)).control_rate_hz == 0.5


def test_an_input_without_a_role_is_other() -> None:
    m = parse_manifest(_with(GOOD, inputs__1__role=_DELETE))
    assert m.inputs[1] == TensorSpec("observation.state", "float32", (6,), "other")


def test_every_optional_field_is_read() -> None:
    data = _with(
        GOOD,
        policy__description="a policy",
        programs__GPU={"file": "g.pte", "precision": "f16", "sha256": SHA, "delegation": "partial"},
        test_case__scale={"action": [1, 2.5, 3, 4, 5, 6]},
        test_case__scale_source="std",
        portable_program={"file": "p.pt2", "sha256": SHA},
        source={"type": "act"},
        model_batch=1,
        quantization={"gate": "ok"},
        tools={"executorch": "0.6"},
        created_utc="2026-01-01T00:00:00Z",
    )
    m = parse_manifest(data)
    assert m.description == "a policy"
    assert m.programs["GPU"] == ProgramEntry("GPU", "g.pte", "f16", SHA, "partial", "")
    assert m.test_case.scale == {"action": (1.0, 2.5, 3.0, 4.0, 5.0, 6.0)}
    assert m.test_case.scale_source == "std"
    assert m.portable_program == FileEntry("p.pt2", SHA)
    assert (m.source, m.model_batch, m.quantization) == ({"type": "act"}, 1, {"gate": "ok"})
    assert (m.tools, m.created_utc) == ({"executorch": "0.6"}, "2026-01-01T00:00:00Z")
    assert parse_manifest(_with(data, model_batch=0)).model_batch == 0


def test_a_scale_without_its_source_is_of_no_named_source() -> None:
    m = parse_manifest(_with(GOOD, test_case__scale={"value": [2]}))
    assert (m.test_case.scale, m.test_case.scale_source) == ({"value": (2.0,)}, "")


def test_the_action_is_the_named_output_not_the_first() -> None:
    m = parse_manifest(GOOD)
    assert m.action_spec == TensorSpec("action", "float32", (10, 6), "action")


def test_input_by_name_and_an_unknown_one() -> None:
    m = parse_manifest(GOOD)
    assert m.input("observation.state") == TensorSpec("observation.state", "float32", (6,), "state")
    with pytest.raises(KeyError) as e:
        m.input("observation.nope")
    assert e.value.args == ("observation.nope",)


def test_nbytes() -> None:
    assert TensorSpec("x", "float32", (10, 6)).nbytes == 240
    assert TensorSpec("x", "uint8", (4, 4, 3)).nbytes == 48
    assert TensorSpec("x", "int64", ()).nbytes == 8


HISTORY = _with(
    GOOD,
    observation_history=2,
    inputs=[
        {"name": "img", "dtype": "uint8", "shape": [2, 4, 4, 3], "role": "image"},
        {"name": "state", "dtype": "float32", "shape": [2, 6], "role": "state"},
        {"name": "env", "dtype": "float32", "shape": [2, 3], "role": "env"},
        {"name": "other", "dtype": "float32", "shape": [5], "role": "other"},
        {"name": "noise", "dtype": "float32", "shape": [10, 6], "role": "noise"},
    ],
)


def test_history_is_the_leading_axis_of_image_state_and_env_inputs_only() -> None:
    m = parse_manifest(HISTORY)
    assert m.observation_history == 2
    assert m.observation_inputs == (
        TensorSpec("img", "uint8", (4, 4, 3), "image"),
        TensorSpec("state", "float32", (6,), "state"),
        TensorSpec("env", "float32", (3,), "env"),
        TensorSpec("other", "float32", (5,), "other"),
    )
    assert m.noise_inputs == (TensorSpec("noise", "float32", (10, 6), "noise"),)


def test_without_history_observation_inputs_keep_their_shapes() -> None:
    data = _with(HISTORY, observation_history=_DELETE, inputs__0__shape=[2, 4, 3], inputs__1__shape=[2])
    m = parse_manifest(_with(data, inputs__2__shape=[1, 3]))
    assert [s.shape for s in m.observation_inputs] == [(2, 4, 3), (2,), (1, 3), (5,)]


@pytest.mark.parametrize(("index", "shape"), [(0, [4, 4, 3]), (1, [6]), (1, [3, 6]), (2, [3])])
def test_an_observation_input_without_the_history_frames_is_refused(index: int, shape: list[int]) -> None:
    assert _refusal(_with(HISTORY, **{f"inputs__{index}__shape": shape})) == _field(
        f"inputs[{index}].shape", "observation_history = 2 frames as the leading axis ([2, ...])", f"list {shape}"
    )


def test_a_noise_input_that_is_not_float32_is_refused() -> None:
    assert _refusal(_with(HISTORY, inputs__4__dtype="float16")) == _field(
        "inputs[4].dtype", "float32 (a noise input is drawn from a standard normal)", "str 'float16'"
    )


LANGUAGE = _with(
    GOOD,
    inputs=[
        *GOOD["inputs"],
        {"name": "task.tokens", "dtype": "int64", "shape": [48], "role": "language"},
        {"name": "task.mask", "dtype": "bool", "shape": [48], "role": "language"},
    ],
    language={
        "tokenizer": {"file": "tokenizer.json", "sha256": SHA},
        "tokens_input": "task.tokens",
        "mask_input": "task.mask",
        "max_length": 48,
    },
)
LANGUAGE_REFUSALS: list[tuple[dict[str, Any], str, str, str]] = [
    ({"language": _DELETE}, "language", "the tokenizer of the language inputs ['task.tokens', 'task.mask']", "nothing"),
    (
        {"language": "x"},
        "language",
        "an object with tokenizer, tokens_input, mask_input, max_length",
        "str 'x'",
    ),
    ({"language__tokenizer": _DELETE}, "language.tokenizer", "an object with file and sha256", "nothing"),
    ({"language__tokenizer__file": _DELETE}, "language.tokenizer.file", "a tokenizer.json file name", "nothing"),
    ({"language__tokenizer__sha256": _DELETE}, "language.tokenizer.sha256", "a 64-character hex sha256", "nothing"),
    ({"language__max_length": _DELETE}, "language.max_length", "a positive number of tokens", "nothing"),
    ({"language__max_length": 0}, "language.max_length", "a positive number of tokens", "int 0"),
    ({"language__tokens_input": _DELETE}, "language.tokens_input", "the name of a language input", "nothing"),
    (
        {"language__tokens_input": "nope"},
        "language.tokens_input",
        "an input with role language, int64 [48]",
        "str 'nope'",
    ),
    (
        {"language__tokens_input": "task.mask"},
        "language.tokens_input",
        "an input with role language, int64 [48]",
        "str 'bool [48] role language'",
    ),
    (
        {"language__tokens_input": "observation.state"},
        "language.tokens_input",
        "an input with role language, int64 [48]",
        "str 'float32 [6] role state'",
    ),
    (
        {"language__max_length": 47},
        "language.tokens_input",
        "an input with role language, int64 [47]",
        "str 'int64 [48] role language'",
    ),
    (
        {"inputs__2__role": "other", "inputs__3__role": "other", "language__tokens_input": "task.tokens"},
        "language.tokens_input",
        "an input with role language, int64 [48]",
        "str 'int64 [48] role other'",
    ),
    (
        {"language__mask_input": "task.tokens"},
        "language.mask_input",
        "an input with role language, bool [48]",
        "str 'int64 [48] role language'",
    ),
    (
        {"inputs__3__dtype": "int64", "language__mask_input": "task.mask"},
        "language.mask_input",
        "an input with role language, bool [48]",
        "str 'int64 [48] role language'",
    ),
    (
        {"inputs__4": {"name": "task.extra", "dtype": "int64", "shape": [48], "role": "language"}},
        "language",
        "tokens_input and mask_input naming the language inputs ['task.tokens', 'task.mask', 'task.extra']",
        "list ['task.mask', 'task.tokens']",
    ),
    ({"language__append_newline": "yes"}, "language.append_newline", "true or false", "str 'yes'"),
    ({"language__append_newline": 1}, "language.append_newline", "true or false", "int 1"),
    ({"language__max_task_bytes": 0}, "language.max_task_bytes", "a positive number of bytes", "int 0"),
    ({"language__max_task_bytes": "9"}, "language.max_task_bytes", "a positive number of bytes", "str '9'"),
]


def _add(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    # "inputs__4" appends an input
    if "inputs__4" in changes:
        data = copy.deepcopy(data)
        data["inputs"].append(changes.pop("inputs__4"))
    return _with(data, **changes)


@pytest.mark.parametrize(("changes", "where", "expected", "got"), LANGUAGE_REFUSALS)
def test_each_bad_language_field_is_refused(changes: dict[str, Any], where: str, expected: str, got: str) -> None:
    assert _refusal(_add(LANGUAGE, dict(changes))) == _field(where, expected, got)


def test_a_language_section_without_language_inputs_is_refused() -> None:
    data = _with(LANGUAGE, inputs=GOOD["inputs"])
    assert _refusal(data) == _field(
        "language.tokens_input", "an input with role language, int64 [48]", "str 'task.tokens'"
    )


def test_a_single_token_is_a_length() -> None:
    data = _with(LANGUAGE, inputs__2__shape=[1], inputs__3__shape=[1], language__max_length=1)
    assert parse_manifest(data).language == LanguageEntry(
        FileEntry("tokenizer.json", SHA), "task.tokens", "task.mask", 1, False, 512
    )


def test_the_language_section_read_with_its_defaults() -> None:
    m = parse_manifest(LANGUAGE)
    assert m.language == LanguageEntry(FileEntry("tokenizer.json", SHA), "task.tokens", "task.mask", 48, False, 512)
    m = parse_manifest(_with(LANGUAGE, language__append_newline=True, language__max_task_bytes=1))
    assert m.language == LanguageEntry(FileEntry("tokenizer.json", SHA), "task.tokens", "task.mask", 48, True, 1)
    assert [s.name for s in m.observation_inputs] == ["observation.images.front", "observation.state"]


RTC = _with(
    GOOD,
    inputs=[
        *GOOD["inputs"],
        {"name": "rtc.prefix", "dtype": "float32", "shape": [12, 6], "role": "prefix"},
        {"name": "rtc.weights", "dtype": "float32", "shape": [12], "role": "prefix_weights"},
        {"name": "rtc.guidance", "dtype": "float32", "shape": [1], "role": "guidance"},
    ],
    rtc={
        "prefix_input": "rtc.prefix",
        "weights_input": "rtc.weights",
        "guidance_input": "rtc.guidance",
        "chunk_size": 12,
        "execution_horizon": 5,
        "prefix_attention_schedule": "LINEAR",
        "max_guidance_weight": 10,
    },
)
RTC_REFUSALS: list[tuple[dict[str, Any], str, str, str]] = [
    (
        {"rtc": _DELETE},
        "rtc",
        "the real-time chunking section of the inputs ['rtc.prefix', 'rtc.weights', 'rtc.guidance']",
        "nothing",
    ),
    (
        {"rtc": "x"},
        "rtc",
        "an object with prefix_input, weights_input, guidance_input, chunk_size, ...",
        "str 'x'",
    ),
    ({"rtc__chunk_size": _DELETE}, "rtc.chunk_size", "a positive number of steps", "nothing"),
    (
        {"rtc__chunk_size": 9},
        "rtc.chunk_size",
        "at least action.chunk_length (10), the steps it serves",
        "int 9",
    ),
    ({"rtc__prefix_input": _DELETE}, "rtc.prefix_input", "the name of the input with role prefix", "nothing"),
    ({"rtc__prefix_input": "nope"}, "rtc.prefix_input", "an input with role prefix, float32 [12, 6]", "str 'nope'"),
    (
        {"rtc__prefix_input": "rtc.weights"},
        "rtc.prefix_input",
        "an input with role prefix, float32 [12, 6]",
        "str 'float32 [12] role prefix_weights'",
    ),
    (
        {"inputs__2__dtype": "float16"},
        "rtc.prefix_input",
        "an input with role prefix, float32 [12, 6]",
        "str 'float16 [12, 6] role prefix'",
    ),
    (
        {"rtc__chunk_size": 11},
        "rtc.prefix_input",
        "an input with role prefix, float32 [11, 6]",
        "str 'float32 [12, 6] role prefix'",
    ),
    (
        {"inputs__2__shape": [12, 5]},
        "rtc.prefix_input",
        "an input with role prefix, float32 [12, 6]",
        "str 'float32 [12, 5] role prefix'",
    ),
    (
        {"rtc__weights_input": _DELETE},
        "rtc.weights_input",
        "the name of the input with role prefix_weights",
        "nothing",
    ),
    (
        {"inputs__3__dtype": "float16"},
        "rtc.weights_input",
        "an input with role prefix_weights, float32 [12]",
        "str 'float16 [12] role prefix_weights'",
    ),
    (
        {"rtc__guidance_input": _DELETE},
        "rtc.guidance_input",
        "the name of the input with role guidance",
        "nothing",
    ),
    (
        {"inputs__4__shape": [2]},
        "rtc.guidance_input",
        "an input with role guidance, float32 [1]",
        "str 'float32 [2] role guidance'",
    ),
    (
        {"inputs__5": {"name": "rtc.prefix2", "dtype": "float32", "shape": [12, 6], "role": "prefix"}},
        "rtc.prefix_input",
        "the one input with role prefix",
        "list ['rtc.prefix', 'rtc.prefix2']",
    ),
    (
        {"inputs__5": {"name": "rtc.guidance2", "dtype": "float32", "shape": [1], "role": "guidance"}},
        "rtc.guidance_input",
        "the one input with role guidance",
        "list ['rtc.guidance', 'rtc.guidance2']",
    ),
    ({"rtc__execution_horizon": _DELETE}, "rtc.execution_horizon", "a positive number of steps", "nothing"),
    ({"rtc__execution_horizon": 0}, "rtc.execution_horizon", "a positive number of steps", "int 0"),
    (
        {"rtc__prefix_attention_schedule": _DELETE},
        "rtc.prefix_attention_schedule",
        "one of ZEROS, ONES, LINEAR, EXP",
        "nothing",
    ),
    (
        {"rtc__prefix_attention_schedule": "linear"},
        "rtc.prefix_attention_schedule",
        "one of ZEROS, ONES, LINEAR, EXP",
        "str 'linear'",
    ),
    ({"rtc__max_guidance_weight": _DELETE}, "rtc.max_guidance_weight", "a positive number", "nothing"),
    ({"rtc__max_guidance_weight": 0}, "rtc.max_guidance_weight", "a positive number", "int 0"),
    ({"rtc__max_guidance_weight": math.inf}, "rtc.max_guidance_weight", "a positive number", "float inf"),
    ({"rtc__max_guidance_weight": math.nan}, "rtc.max_guidance_weight", "a positive number", "float nan"),
    ({"rtc__max_guidance_weight": "1"}, "rtc.max_guidance_weight", "a positive number", "str '1'"),
]


@pytest.mark.parametrize(("changes", "where", "expected", "got"), RTC_REFUSALS)
def test_each_bad_rtc_field_is_refused(changes: dict[str, Any], where: str, expected: str, got: str) -> None:
    changes = dict(changes)
    data = copy.deepcopy(RTC)
    if "inputs__5" in changes:
        data["inputs"].append(changes.pop("inputs__5"))
    assert _refusal(_with(data, **changes)) == _field(where, expected, got)


@pytest.mark.parametrize("role", ["prefix", "prefix_weights", "guidance"])
def test_any_rtc_input_without_the_section_is_refused(role: str) -> None:
    data = copy.deepcopy(GOOD)
    data["inputs"].append({"name": "x", "dtype": "float32", "shape": [1], "role": role})
    assert _refusal(data) == _field("rtc", "the real-time chunking section of the inputs ['x']", "nothing")


def test_the_rtc_section_read() -> None:
    m = parse_manifest(RTC)
    assert m.rtc == RtcEntry("rtc.prefix", "rtc.weights", "rtc.guidance", 12, 5, "LINEAR", 10.0)
    assert type(m.rtc.max_guidance_weight) is float
    assert [s.name for s in m.observation_inputs] == ["observation.images.front", "observation.state"]
    data = _with(RTC, inputs__2__shape=[10, 6], inputs__3__shape=[10], rtc__chunk_size=10, rtc__execution_horizon=1)
    assert parse_manifest(_with(data, rtc__max_guidance_weight=0.5)).rtc == RtcEntry(
        "rtc.prefix", "rtc.weights", "rtc.guidance", 10, 1, "LINEAR", 0.5
    )


def test_every_field_written_is_read_back() -> None:
    data = _with(
        LANGUAGE,
        rtc=RTC["rtc"],
        policy__description="d",
        test_case__scale={"action": [1, 2, 3, 4, 5, 6]},
        test_case__scale_source="std",
        portable_program={"file": "p.pt2", "sha256": SHA},
        source={"type": "smolvla"},
        model_batch=1,
        quantization={"gate": "ok"},
        tools={"executorch": "0.6"},
        created_utc="now",
    )
    data["inputs"] += RTC["inputs"][2:]
    m = parse_manifest(data)
    assert parse_manifest(json.loads(json.dumps(m.to_json()))) == m
    out = m.to_json()
    assert out["language"] == {**data["language"], "append_newline": False, "max_task_bytes": 512}
    assert out["rtc"] == {**data["rtc"], "max_guidance_weight": 10.0}
    assert out["test_case"] == {
        "file": "t.npz",
        "sha256": SHA,
        "tolerance": {**DEFAULT_TOLERANCE, "f32": 1e-4},
        "scale": {"action": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]},
        "scale_source": "std",
    }
    assert (out["portable_program"], out["source"], out["model_batch"]) == (
        {"file": "p.pt2", "sha256": SHA},
        {"type": "smolvla"},
        1,
    )
    assert (out["quantization"], out["tools"], out["created_utc"]) == ({"gate": "ok"}, {"executorch": "0.6"}, "now")
    assert parse_manifest(json.loads(json.dumps(parse_manifest(HISTORY).to_json()))).observation_history == 2


def test_a_minimal_manifest_written_whole() -> None:
    assert parse_manifest(GOOD).to_json() == {
        "format": "lerobot-runtime-bundle",
        "format_version": 1,
        "policy": {"name": "p", "description": ""},
        "inputs": GOOD["inputs"],
        "outputs": GOOD["outputs"],
        "action": GOOD["action"],
        "control_rate_hz": 30.0,
        "programs": GOOD["programs"],
        "test_case": {"file": "t.npz", "sha256": SHA, "tolerance": {**DEFAULT_TOLERANCE, "f32": 1e-4}},
        "tools": {},
        "created_utc": "",
    }


def test_write_and_read_manifest(tmp_path: Path) -> None:
    m = parse_manifest(HISTORY)
    path = m.write(tmp_path)
    assert path == tmp_path / "manifest.json"
    text = path.read_text()
    assert text == json.dumps(m.to_json(), indent=2) + "\n"
    assert read_manifest(tmp_path) == m
    assert read_manifest(str(tmp_path)) == m


def test_read_manifest_names_its_path_in_a_refusal(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(_with(GOOD, format=_DELETE)))
    with pytest.raises(BundleError) as e:
        read_manifest(tmp_path)
    assert (
        str(e.value) == f"{tmp_path / 'manifest.json'}: field 'format': expected 'lerobot-runtime-bundle', got nothing"
    )


def test_a_missing_or_unreadable_manifest(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as e:
        read_manifest(tmp_path)
    assert (
        str(e.value) == f"{tmp_path / 'manifest.json'}: no manifest; is {tmp_path} a lerobot-runtime bundle directory?"
    )
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError) as e:
        read_manifest(tmp_path)
    assert str(e.value) == (
        f"{tmp_path / 'manifest.json'}: not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    )


def test_an_int8_bundle_says_its_float_layers_precision_only_when_its_gate_fell_back() -> None:
    from tests.bundle.manifests import small_manifest

    assert small_manifest().int8_float_precision is None
    gate = {"max_error": 0.04, "float_arithmetic": "bf16"}
    assert small_manifest(quantization={"gate": gate}).int8_float_precision is None
    fell_back = {**gate, "float_arithmetic": "f32", "crashed": {"bf16": "SIGFPE"}, "float_precision": "f32"}
    assert small_manifest(quantization={"gate": fell_back}).int8_float_precision == "f32"
    assert small_manifest(quantization={"gate": fell_back}).int8_crashes == "bf16: SIGFPE"
    assert small_manifest(quantization={"gate": gate}).int8_crashes == ""
    assert small_manifest(quantization={"gate": None}).int8_float_precision is None
