"""The bundle manifest (``manifest.json``): what a policy takes, what it returns, how to run it.

The format is documented in ``docs/bundle.md``. Parsing validates every field and names the file and
the field in each error; writing produces the same structure back. Shapes are the program's own
shapes (no implicit batch dimension), so what a client sends is exactly what the program takes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, get_args

from runtime.errors import BundleError

FORMAT_NAME: Final = "lerobot-runtime-bundle"
FORMAT_VERSION: Final = 1
MANIFEST_FILE: Final = "manifest.json"

Device = Literal["CPU", "GPU", "NPU"]
# int8: post-training quantised weights and activations (``lerobot-runtime quantize``); the float
# precisions are what the program was lowered for.
Precision = Literal["f32", "f16", "bf16", "int8"]
# noise: the sampling noise of a generative policy (Diffusion Policy's initial sample); the server draws
# it per request from a standard normal, clients never send it.
# language: a language policy's task tokens and their mask; the server fills them from the request's
# task string with the bundle's tokenizer (see LanguageEntry), clients never send them.
# prefix, prefix_weights, guidance: real-time chunking (see RtcEntry): the previous chunk's leftover,
# the per-step weights of the guidance towards it and its cap; the server fills them from the
# request's prefix and delay (no prefix: zero weights, plain sampling), clients never send them.
InputRole = Literal["image", "state", "env", "other", "noise", "language", "prefix", "prefix_weights", "guidance"]
OutputRole = Literal["action", "other"]

DEVICES: Final[tuple[str, ...]] = get_args(Device)
PRECISIONS: Final[tuple[str, ...]] = get_args(Precision)
INPUT_ROLES: Final[tuple[str, ...]] = get_args(InputRole)
HISTORY_ROLES: Final = ("image", "state", "env")  # the inputs that carry observation_history frames
RTC_ROLES: Final = ("prefix", "prefix_weights", "guidance")  # in this order in RtcEntry and the program
SERVER_ROLES: Final = ("noise", "language", *RTC_ROLES)  # inputs the server fills: clients never send them
DTYPES: Final = ("float32", "float16", "uint8", "int8", "int32", "int64", "bool")

# Parity tolerance by the precision the device really ran: the largest error accepted, in the units of
# the test case's ``scale`` (normalised action units for a LeRobot policy; see TestCaseEntry).
DEFAULT_TOLERANCE: Final[Mapping[str, float]] = {"f32": 2e-5, "f16": 0.075, "bf16": 0.075, "int8": 0.15}
# An export measures a bundle's f32 tolerance (see ToleranceBasis and runtime.export.prove): this many
# times the larger of the reference's own float32 rounding and the lowered program's error on the
# exporting machine, never below DEFAULT_TOLERANCE["f32"] (the floor) nor above F32_CEILING. The margin
# covers what differs on the robot (another CPU's kernels and blocking); the ceiling keeps an order of
# magnitude between the tolerance and the silent wrong results the gate exists for (1e-2 and more).
F32_MARGIN: Final = 4.0
F32_CEILING: Final = 1e-3
ToleranceHow = Literal["measured", "given", "default"]


@dataclass(frozen=True)
class ToleranceBasis:
    """Where a precision's tolerance came from: measured at export, given with ``--tolerance``, or the default.

    ``reference_spread``: the reference at float32 against float64 in the stack that traced it;
    ``lowered_error``: the lowered program against the reference on the exporting machine, at the
    precision named in ``lowered_by`` (None where it did not run at that precision there).
    """

    how: ToleranceHow
    floor: float = DEFAULT_TOLERANCE["f32"]
    margin: float = F32_MARGIN
    reference_spread: float | None = None
    lowered_error: float | None = None
    lowered_by: str = ""  # engine, precision and CPU of the measurement
    traced_by: str = ""  # the stack that computed the reference (LeRobot, transformers, torch)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"how": self.how, "floor": self.floor, "margin": self.margin}
        for key in ("reference_spread", "lowered_error"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        for key in ("lowered_by", "traced_by"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    def describe(self, tolerance: float) -> str:
        """One line for ``check`` and the log: the tolerance, where it came from, what was measured."""
        parts = []
        if self.reference_spread is not None:
            by = f" ({self.traced_by})" if self.traced_by else ""
            parts.append(f"the reference at f32 against f64, {self.reference_spread:.3g}{by}")
        if self.lowered_error is not None:
            by = f" ({self.lowered_by})" if self.lowered_by else ""
            parts.append(f"the lowered program against the reference, {self.lowered_error:.3g}{by}")
        measured = "; ".join(parts) or "nothing"
        if self.how == "default":
            return f"{tolerance:.3g}, the default (not measured at export)"
        if self.how == "given":
            return f"{tolerance:.3g}, given at export (--tolerance); measured then: {measured}"
        return (
            f"{tolerance:.3g}, measured at export: {self.margin:g} x the larger of {measured} (floor {self.floor:.3g})"
        )


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str = "other"

    @property
    def nbytes(self) -> int:
        import numpy as np

        return int(np.dtype(self.dtype).itemsize * math.prod(self.shape))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "role": self.role}


@dataclass(frozen=True)
class ProgramEntry:
    device: str
    file: str
    precision: str
    sha256: str
    # "full": one OpenVINO delegate from inputs to outputs (the direct openvino engine can run it);
    # "partial": parts of the graph stay on ExecuTorch's portable kernels.
    delegation: Literal["full", "partial"]
    openvino_version: str

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "precision": self.precision,
            "sha256": self.sha256,
            "delegation": self.delegation,
            "openvino_version": self.openvino_version,
        }


@dataclass(frozen=True)
class FileEntry:
    file: str
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256}


@dataclass(frozen=True)
class LanguageEntry:
    """A policy that takes a task string: how the server turns it into the program's token inputs.

    ``tokenizer``: the tokenizers library's definition (``tokenizer.json``), truncating and padding to
    ``max_length``; ``append_newline``: a newline is added to a task without one first (LeRobot's
    SmolVLA preprocessor does); ``max_task_bytes``: the longest task accepted, UTF-8 encoded.
    """

    tokenizer: FileEntry
    tokens_input: str
    mask_input: str
    max_length: int
    append_newline: bool = False
    max_task_bytes: int = 512

    def to_json(self) -> dict[str, Any]:
        return {
            "tokenizer": self.tokenizer.to_json(),
            "tokens_input": self.tokens_input,
            "mask_input": self.mask_input,
            "max_length": self.max_length,
            "append_newline": self.append_newline,
            "max_task_bytes": self.max_task_bytes,
        }


@dataclass(frozen=True)
class RtcEntry:
    """A policy that takes the previous chunk's leftover (real-time chunking, LeRobot's RTC).

    ``prefix_input``: float32 ``[chunk_size, len(action.names)]``, the leftover in the action's joint
    order and units (the program normalises it and pads it to the model's action width);
    ``weights_input``: float32 ``[chunk_size]``, LeRobot's prefix weights (runtime.bundle.rtc);
    ``guidance_input``: float32 ``[1]``, LeRobot's ``max_guidance_weight``. The other fields are the
    defaults a request that names none gets (the checkpoint's ``rtc_config``).
    """

    prefix_input: str
    weights_input: str
    guidance_input: str
    chunk_size: int
    execution_horizon: int
    prefix_attention_schedule: str
    max_guidance_weight: float

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix_input": self.prefix_input,
            "weights_input": self.weights_input,
            "guidance_input": self.guidance_input,
            "chunk_size": self.chunk_size,
            "execution_horizon": self.execution_horizon,
            "prefix_attention_schedule": self.prefix_attention_schedule,
            "max_guidance_weight": self.max_guidance_weight,
        }


@dataclass(frozen=True)
class TestCaseEntry:
    __test__ = False  # a bundle test case, not a pytest class
    file: str
    sha256: str
    tolerance: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    # Per output, one divisor per element of its last axis: an error counts as |got - reference| / scale,
    # so the tolerance means the same for actions of magnitude 40 as for actions of magnitude 1. For a
    # LeRobot policy the action's scale is its normalisation statistic (std, or half the min-max range);
    # outputs not named here are compared in absolute units.
    scale: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    scale_source: str = "absolute"  # what the scale is, for people reading the log and the manifest
    # per precision, where its tolerance came from (an export since the f32 tolerance is measured has f32)
    basis: Mapping[str, ToleranceBasis] = field(default_factory=dict)

    def describe_tolerance(self, precision: str) -> str:
        tol = self.tolerance.get(precision, DEFAULT_TOLERANCE.get(precision, 0.0))
        basis = self.basis.get(precision)
        return basis.describe(tol) if basis is not None else ToleranceBasis("default").describe(tol)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "sha256": self.sha256, "tolerance": dict(self.tolerance)}
        if self.scale:
            out["scale"] = {k: list(v) for k, v in self.scale.items()}
            out["scale_source"] = self.scale_source
        if self.basis:
            out["tolerance_basis"] = {k: v.to_json() for k, v in self.basis.items()}
        return out


def describe_crashes(crashed: Mapping[str, str]) -> str:
    """``{"bf16": "SIGFPE"}`` as ``bf16: SIGFPE``: each precision the INT8 gate tried and the signal that
    ended it."""
    return ", ".join(f"{precision}: {signal}" for precision, signal in crashed.items())


@dataclass(frozen=True)
class Manifest:
    policy_name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    action_output: str
    chunk_length: int
    action_names: tuple[str, ...]
    control_rate_hz: float
    programs: Mapping[str, ProgramEntry]
    test_case: TestCaseEntry
    portable_program: FileEntry | None = None
    tools: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    created_utc: str = ""
    # Where the policy came from (for a LeRobot checkpoint: policy type, version, n_action_steps...),
    # and how a leading batch dimension of the model was handled (1: the model takes a batch of one, the
    # program adds and removes it inside the graph, the wire stays unbatched; 0: no batch dimension).
    source: Mapping[str, Any] = field(default_factory=dict)
    model_batch: int = 0
    # Observations the program takes at once (LeRobot's n_obs_steps): every image, state and env input
    # carries that many frames, oldest first, as its leading axis; the server keeps the history per
    # client and clients send one frame (see observation_inputs and runtime.server.history).
    observation_history: int = 1
    # For an int8 bundle: the calibration source and the accuracy gate's result (see quantize).
    quantization: Mapping[str, Any] = field(default_factory=dict)
    # For a language policy (SmolVLA): its tokenizer and token inputs; requests then carry a task.
    language: LanguageEntry | None = None
    # For a policy that takes the previous chunk's leftover (SmolVLA with RTC).
    rtc: RtcEntry | None = None
    format_version: int = FORMAT_VERSION

    @property
    def int8_crashes(self) -> str:
        """What crashed OpenVINO when the INT8 gate ran the program, as ``bf16: SIGFPE, ...``; "" if nothing."""
        return describe_crashes(dict(self.quantization.get("gate") or {}).get("crashed") or {})

    @property
    def int8_float_precision(self) -> str | None:
        """The precision an INT8 program's float layers must run at, when its accuracy gate could not
        run them at the CPU's default (OpenVINO crashed there, ``quantization.gate.crashed``); None:
        the CPU's default."""
        value = dict(self.quantization.get("gate") or {}).get("float_precision")
        return str(value) if value else None

    @property
    def action_spec(self) -> TensorSpec:
        return next(o for o in self.outputs if o.name == self.action_output)

    @property
    def observation_inputs(self) -> tuple[TensorSpec, ...]:
        """What a client sends per request: one frame of each observation input, no noise, no tokens,
        no prefix inputs."""
        return tuple(
            TensorSpec(s.name, s.dtype, s.shape[1:] if self._has_history(s) else s.shape, s.role)
            for s in self.inputs
            if s.role not in SERVER_ROLES
        )

    @property
    def noise_inputs(self) -> tuple[TensorSpec, ...]:
        return tuple(s for s in self.inputs if s.role == "noise")

    def _has_history(self, spec: TensorSpec) -> bool:
        return self.observation_history > 1 and spec.role in HISTORY_ROLES

    def input(self, name: str) -> TensorSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "policy": {"name": self.policy_name, "description": self.description},
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "action": {
                "output": self.action_output,
                "chunk_length": self.chunk_length,
                "names": list(self.action_names),
            },
            "control_rate_hz": self.control_rate_hz,
            "programs": {dev: p.to_json() for dev, p in self.programs.items()},
            "test_case": self.test_case.to_json(),
            "tools": dict(self.tools),
            "created_utc": self.created_utc,
        }
        if self.portable_program is not None:
            out["portable_program"] = self.portable_program.to_json()
        if self.source:
            out["source"] = dict(self.source)
        if self.model_batch:
            out["model_batch"] = self.model_batch
        if self.observation_history > 1:
            out["observation_history"] = self.observation_history
        if self.quantization:
            out["quantization"] = dict(self.quantization)
        if self.language is not None:
            out["language"] = self.language.to_json()
        if self.rtc is not None:
            out["rtc"] = self.rtc.to_json()
        return out

    def write(self, directory: str | Path) -> Path:
        path = Path(directory) / MANIFEST_FILE
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path


# --- parsing ---------------------------------------------------------------------------------


class _Reader:
    """Typed access to a JSON object that names ``file`` and the dotted field in each error."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, where: str, expected: str, got: Any) -> BundleError:
        shown = "nothing" if got is _MISSING else f"{type(got).__name__} {got!r}"
        return BundleError(f"{self.file}: field '{where}': expected {expected}, got {shown}")

    def get(self, obj: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...], expected: str) -> Any:
        value = obj.get(key, _MISSING)
        path = f"{where}.{key}" if where else key
        if value is _MISSING or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            raise self.fail(path, expected, value)
        if not isinstance(value, kind):
            raise self.fail(path, expected, value)
        return value

    def opt(
        self, obj: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...], expected: str, default: Any
    ) -> Any:
        if key not in obj:
            return default
        return self.get(obj, key, where, kind, expected)


_MISSING: Final = object()


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _tensor_specs(r: _Reader, raw: Any, where: str, roles: tuple[str, ...]) -> tuple[TensorSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise r.fail(where, "a non-empty list of tensors", raw)
    specs: list[TensorSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise r.fail(at, "an object with name, dtype, shape, role", item)
        name = r.get(item, "name", at, str, "a tensor name")
        if not name or name in seen:
            raise r.fail(f"{at}.name", "a unique, non-empty name", name)
        seen.add(name)
        dtype = r.get(item, "dtype", at, str, f"one of {', '.join(DTYPES)}")
        if dtype not in DTYPES:
            raise r.fail(f"{at}.dtype", f"one of {', '.join(DTYPES)}", dtype)
        shape = r.get(item, "shape", at, list, "a list of positive integers")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
            raise r.fail(f"{at}.shape", "a list of positive integers (static shapes)", shape)
        role = r.opt(item, "role", at, str, f"one of {', '.join(roles)}", "other")
        if role not in roles:
            raise r.fail(f"{at}.role", f"one of {', '.join(roles)}", role)
        specs.append(TensorSpec(name=name, dtype=dtype, shape=tuple(shape), role=role))
    return tuple(specs)


def _sha(r: _Reader, obj: Mapping[str, Any], where: str) -> str:
    sha: str = r.get(obj, "sha256", where, str, "a 64-character hex sha256")
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise r.fail(f"{where}.sha256", "a 64-character lowercase hex sha256", sha)
    return sha


def parse_manifest(data: Any, file: str = MANIFEST_FILE) -> Manifest:
    """Validate a decoded ``manifest.json`` and build a :class:`Manifest`."""
    r = _Reader(file)
    if not isinstance(data, dict):
        raise r.fail("(top level)", "a JSON object", data)
    fmt = r.get(data, "format", "", str, f"'{FORMAT_NAME}'")
    if fmt != FORMAT_NAME:
        raise r.fail("format", f"'{FORMAT_NAME}'", fmt)
    version = r.get(data, "format_version", "", int, f"format version {FORMAT_VERSION}")
    if version != FORMAT_VERSION:
        raise BundleError(
            f"{file}: field 'format_version': this lerobot-runtime reads version {FORMAT_VERSION}, the bundle "
            f"is version {version}; re-export the bundle or upgrade lerobot-runtime"
        )
    policy = r.get(data, "policy", "", dict, "an object with the policy's name")
    name = r.get(policy, "name", "policy", str, "the policy name")
    description = r.opt(policy, "description", "policy", str, "a string", "")
    inputs = _tensor_specs(r, data.get("inputs", _MISSING), "inputs", get_args(InputRole))
    outputs = _tensor_specs(r, data.get("outputs", _MISSING), "outputs", get_args(OutputRole))

    action = r.get(data, "action", "", dict, "an object with output, chunk_length, names")
    action_output = r.get(action, "output", "action", str, "the name of the action output")
    by_name = {o.name: o for o in outputs}
    if action_output not in by_name:
        raise r.fail("action.output", f"one of the outputs ({', '.join(by_name)})", action_output)
    chunk = r.get(action, "chunk_length", "action", int, "a positive integer")
    names = r.get(action, "names", "action", list, "a list of joint names")
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise r.fail("action.names", "a non-empty list of unique joint names", names)
    aspec = by_name[action_output]
    if aspec.shape != (chunk, len(names)):
        raise r.fail(
            f"outputs[{outputs.index(aspec)}].shape",
            f"[chunk_length, len(action.names)] = [{chunk}, {len(names)}]",
            list(aspec.shape),
        )
    rate = r.get(data, "control_rate_hz", "", (int, float), "a positive number of Hz")
    if not rate > 0 or not math.isfinite(rate):
        raise r.fail("control_rate_hz", "a positive number of Hz", rate)

    progs_raw = r.get(data, "programs", "", dict, "an object mapping device to program")
    if not progs_raw:
        raise r.fail("programs", f"at least one program for one of {', '.join(DEVICES)}", progs_raw)
    programs: dict[str, ProgramEntry] = {}
    for dev, entry in progs_raw.items():
        at = f"programs.{dev}"
        if dev not in DEVICES:
            raise r.fail("programs", f"device keys among {', '.join(DEVICES)}", dev)
        if not isinstance(entry, dict):
            raise r.fail(at, "an object with file, precision, sha256", entry)
        pfile = r.get(entry, "file", at, str, "a .pte file name")
        if not pfile.endswith(".pte"):
            raise r.fail(f"{at}.file", "a file name ending in .pte", pfile)
        precision = r.get(entry, "precision", at, str, f"one of {', '.join(PRECISIONS)}")
        if precision not in PRECISIONS:
            raise r.fail(f"{at}.precision", f"one of {', '.join(PRECISIONS)}", precision)
        delegation = r.get(entry, "delegation", at, str, "'full' or 'partial'")
        if delegation not in ("full", "partial"):
            raise r.fail(f"{at}.delegation", "'full' or 'partial'", delegation)
        ov_version = r.opt(entry, "openvino_version", at, str, "a version string", "")
        programs[dev] = ProgramEntry(dev, pfile, precision, _sha(r, entry, at), delegation, ov_version)

    tc = r.get(data, "test_case", "", dict, "an object with file, sha256, tolerance")
    tc_file = r.get(tc, "file", "test_case", str, "an .npz file name")
    tol_raw = r.opt(tc, "tolerance", "test_case", dict, "an object of precision -> max abs error", {})
    tolerance = dict(DEFAULT_TOLERANCE)
    for prec, tol in tol_raw.items():
        if prec not in PRECISIONS or isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol >= 0:
            raise r.fail(
                f"test_case.tolerance.{prec}", f"a non-negative number for one of {', '.join(PRECISIONS)}", tol
            )
        tolerance[prec] = float(tol)
    scale_raw = r.opt(tc, "scale", "test_case", dict, "an object of output -> list of positive numbers", {})
    scale: dict[str, tuple[float, ...]] = {}
    for out_name, values in scale_raw.items():
        at = f"test_case.scale.{out_name}"
        spec = next((o for o in outputs if o.name == out_name), None)
        if spec is None:
            raise r.fail(at, f"the name of an output ({', '.join(o.name for o in outputs)})", out_name)
        ok = isinstance(values, list) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in values
        )
        if not ok or len(values) != spec.shape[-1]:
            raise r.fail(at, f"{spec.shape[-1]} positive numbers (one per element of the last axis)", values)
        scale[out_name] = tuple(float(v) for v in values)
    scale_source = r.opt(tc, "scale_source", "test_case", str, "a string", "absolute" if not scale else "")
    basis_raw = r.opt(tc, "tolerance_basis", "test_case", dict, "an object of precision -> tolerance basis", {})
    basis: dict[str, ToleranceBasis] = {}
    for prec, b in basis_raw.items():
        at = f"test_case.tolerance_basis.{prec}"
        if prec not in PRECISIONS:
            raise r.fail(at, f"a precision among {', '.join(PRECISIONS)}", prec)
        if not isinstance(b, dict):
            raise r.fail(at, "an object with how, floor, margin", b)
        how = r.get(b, "how", at, str, "measured, given or default")
        if how not in get_args(ToleranceHow):
            raise r.fail(f"{at}.how", "measured, given or default", how)
        numbers: dict[str, float | None] = {}
        for key in ("floor", "margin", "reference_spread", "lowered_error"):
            value = r.opt(b, key, at, (int, float), "a non-negative number", None)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise r.fail(f"{at}.{key}", "a non-negative number", value)
            numbers[key] = None if value is None else float(value)
        basis[prec] = ToleranceBasis(
            how,
            floor=numbers["floor"] if numbers["floor"] is not None else DEFAULT_TOLERANCE["f32"],
            margin=numbers["margin"] if numbers["margin"] is not None else F32_MARGIN,
            reference_spread=numbers["reference_spread"],
            lowered_error=numbers["lowered_error"],
            lowered_by=r.opt(b, "lowered_by", at, str, "a string", ""),
            traced_by=r.opt(b, "traced_by", at, str, "a string", ""),
        )
    test_case = TestCaseEntry(tc_file, _sha(r, tc, "test_case"), tolerance, scale, scale_source, basis)

    portable = None
    if "portable_program" in data:
        pp = r.get(data, "portable_program", "", dict, "an object with file and sha256")
        portable = FileEntry(
            r.get(pp, "file", "portable_program", str, "a .pt2 file name"), _sha(r, pp, "portable_program")
        )
    source = r.opt(data, "source", "", dict, "an object describing where the policy came from", {})
    model_batch = r.opt(data, "model_batch", "", int, "0 or 1", 0)
    if model_batch not in (0, 1):
        raise r.fail("model_batch", "0 (no batch dimension) or 1 (a batch of one, removed in the graph)", model_batch)
    history = r.opt(data, "observation_history", "", int, "a positive number of frames", 1)
    if history < 1:
        raise r.fail("observation_history", "a positive number of frames", history)
    for i, spec in enumerate(inputs):
        if spec.role == "noise" and spec.dtype != "float32":
            raise r.fail(f"inputs[{i}].dtype", "float32 (a noise input is drawn from a standard normal)", spec.dtype)
        if history > 1 and spec.role in HISTORY_ROLES and spec.shape[:1] != (history,):
            raise r.fail(
                f"inputs[{i}].shape",
                f"observation_history = {history} frames as the leading axis ([{history}, ...])",
                list(spec.shape),
            )
    quantization = r.opt(data, "quantization", "", dict, "an object describing the quantisation", {})
    language = _language(r, data, inputs)
    rtc = _rtc(r, data, inputs, chunk, len(names))
    tools = r.opt(data, "tools", "", dict, "an object of tool -> version", {})
    if not all(isinstance(v, str) for v in tools.values()):
        raise r.fail("tools", "an object of tool name -> version string", tools)
    return Manifest(
        policy_name=name,
        description=description,
        inputs=inputs,
        outputs=outputs,
        action_output=action_output,
        chunk_length=chunk,
        action_names=tuple(names),
        control_rate_hz=float(rate),
        programs=programs,
        test_case=test_case,
        portable_program=portable,
        tools=dict(tools),
        created_utc=r.opt(data, "created_utc", "", str, "an ISO-8601 time", ""),
        source=dict(source),
        model_batch=model_batch,
        observation_history=history,
        quantization=dict(quantization),
        language=language,
        rtc=rtc,
        format_version=version,
    )


def _language(r: _Reader, data: Mapping[str, Any], inputs: tuple[TensorSpec, ...]) -> LanguageEntry | None:
    roles = [s.name for s in inputs if s.role == "language"]
    if "language" not in data:
        if roles:
            raise r.fail("language", f"the tokenizer of the language inputs {roles}", _MISSING)
        return None
    lang = r.get(data, "language", "", dict, "an object with tokenizer, tokens_input, mask_input, max_length")
    tok = r.get(lang, "tokenizer", "language", dict, "an object with file and sha256")
    entry = FileEntry(
        r.get(tok, "file", "language.tokenizer", str, "a tokenizer.json file name"), _sha(r, tok, "language.tokenizer")
    )
    length = r.get(lang, "max_length", "language", int, "a positive number of tokens")
    if length < 1:
        raise r.fail("language.max_length", "a positive number of tokens", length)
    by_name = {s.name: s for s in inputs}
    names: dict[str, str] = {}
    for key, dtype in (("tokens_input", "int64"), ("mask_input", "bool")):
        name = r.get(lang, key, "language", str, "the name of a language input")
        spec = by_name.get(name)
        if spec is None or spec.role != "language" or spec.dtype != dtype or spec.shape != (length,):
            shown = None if spec is None else f"{spec.dtype} {list(spec.shape)} role {spec.role}"
            raise r.fail(f"language.{key}", f"an input with role language, {dtype} [{length}]", shown or name)
        names[key] = name
    if sorted(names.values()) != sorted(roles):
        expected = f"tokens_input and mask_input naming the language inputs {roles}"
        raise r.fail("language", expected, sorted(names.values()))
    newline = r.opt(lang, "append_newline", "language", bool, "true or false", False)
    max_bytes = r.opt(lang, "max_task_bytes", "language", int, "a positive number of bytes", 512)
    if max_bytes < 1:
        raise r.fail("language.max_task_bytes", "a positive number of bytes", max_bytes)
    return LanguageEntry(entry, names["tokens_input"], names["mask_input"], length, newline, max_bytes)


def _rtc(
    r: _Reader, data: Mapping[str, Any], inputs: tuple[TensorSpec, ...], chunk_length: int, joints: int
) -> RtcEntry | None:
    from runtime.bundle.rtc import SCHEDULES

    by_role = {role: [s.name for s in inputs if s.role == role] for role in RTC_ROLES}
    named = [n for names in by_role.values() for n in names]
    if "rtc" not in data:
        if named:
            raise r.fail("rtc", f"the real-time chunking section of the inputs {named}", _MISSING)
        return None
    rtc = r.get(data, "rtc", "", dict, "an object with prefix_input, weights_input, guidance_input, chunk_size, ...")
    size = r.get(rtc, "chunk_size", "rtc", int, "a positive number of steps")
    if size < chunk_length:
        raise r.fail("rtc.chunk_size", f"at least action.chunk_length ({chunk_length}), the steps it serves", size)
    by_name = {s.name: s for s in inputs}
    names: list[str] = []
    for key, role, shape in (
        ("prefix_input", "prefix", (size, joints)),
        ("weights_input", "prefix_weights", (size,)),
        ("guidance_input", "guidance", (1,)),
    ):
        name = r.get(rtc, key, "rtc", str, f"the name of the input with role {role}")
        spec = by_name.get(name)
        if spec is None or spec.role != role or spec.dtype != "float32" or spec.shape != shape:
            shown = name if spec is None else f"{spec.dtype} {list(spec.shape)} role {spec.role}"
            raise r.fail(f"rtc.{key}", f"an input with role {role}, float32 {list(shape)}", shown)
        if by_role[role] != [name]:
            raise r.fail(f"rtc.{key}", f"the one input with role {role}", by_role[role])
        names.append(name)
    horizon = r.get(rtc, "execution_horizon", "rtc", int, "a positive number of steps")
    if horizon < 1:
        raise r.fail("rtc.execution_horizon", "a positive number of steps", horizon)
    schedule = r.get(rtc, "prefix_attention_schedule", "rtc", str, f"one of {', '.join(SCHEDULES)}")
    if schedule not in SCHEDULES:
        raise r.fail("rtc.prefix_attention_schedule", f"one of {', '.join(SCHEDULES)}", schedule)
    cap = r.get(rtc, "max_guidance_weight", "rtc", (int, float), "a positive number")
    if not (cap > 0 and math.isfinite(cap)):
        raise r.fail("rtc.max_guidance_weight", "a positive number", cap)
    return RtcEntry(names[0], names[1], names[2], size, horizon, schedule, float(cap))


def read_manifest(directory: str | Path) -> Manifest:
    path = Path(directory) / MANIFEST_FILE
    try:
        text = path.read_text()
    except FileNotFoundError as e:
        raise BundleError(f"{path}: no manifest; is {directory} a lerobot-runtime bundle directory?") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BundleError(f"{path}: not valid JSON: {e}") from e
    return parse_manifest(data, str(path))
