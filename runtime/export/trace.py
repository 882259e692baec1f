"""The first half of an export: a policy traced into a portable program, its test case and its spread.

``FUNC()`` returns ``(torch.nn.Module, dict[str, torch.Tensor])``: the model and named example inputs
in forward-argument order. Tracing runs the model eagerly on them (the test case's reference), runs
it again at float64 (how far float32 rounding alone moves the reference: the model's own numerical
spread), checks every shape, dtype and role, and writes the ``torch.export`` program. It needs torch
and nothing of ExecuTorch or OpenVINO, so it runs in the stack that built the policy (for a LeRobot
checkpoint, the LeRobot release that wrote it, see runtime.export.lerobot.stacks); the second half,
lowering and proving (runtime.export.export), runs where ExecuTorch's OpenVINO backend is installed.
A trace crosses between the two as a directory (:func:`write_trace`, :func:`read_trace`).
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from drivers.calibration import SO101_JOINTS
from runtime.bundle.manifest import DTYPES, INPUT_ROLES, TensorSpec
from runtime.errors import BundleError, ExportError, MissingDependencyError
from runtime.versions import package_version

log = logging.getLogger(__name__)

TRACE_FILE: Final = "trace.json"
PORTABLE_FILE: Final = "model.pt2"
TEST_CASE_FILE: Final = "test_case.npz"
TRACE_FORMAT: Final = 1


@contextmanager
def step(n: int, total: int, what: str) -> Iterator[None]:
    """Progress for the slow steps: one line when a step starts and one with its duration."""
    log.info("[%d/%d] %s ...", n, total, what)
    t = time.perf_counter()
    yield
    log.info("[%d/%d] %s done in %.1f s", n, total, what, time.perf_counter() - t)


def load_factory(spec: str) -> Callable[[], tuple[Any, dict[str, Any]]]:
    """``path/to/file.py:FUNC`` or ``package.module:FUNC`` -> the function."""
    target, sep, func = spec.rpartition(":")
    if not sep or not target or not func:
        raise ExportError(f"--factory: expected FILE.py:FUNC or module:FUNC, got {spec!r}")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ExportError(f"--factory: {path} does not exist")
        mod_spec = importlib.util.spec_from_file_location(f"_lerobot_runtime_factory_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise ExportError(f"--factory: cannot import {path}")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = module
        mod_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise ExportError(f"--factory: cannot import module {target!r}: {e}") from e
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ExportError(f"--factory: {target} has no function {func!r}")
    return fn  # type: ignore[no-any-return]


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise MissingDependencyError(
            "exporting needs torch, executorch and nncf: pip install 'lerobot-runtime[export]'"
        ) from e
    return torch


def stack_versions(*, lerobot: bool) -> dict[str, str]:
    """The packages that computed a trace's reference (for a LeRobot checkpoint, the manifest's
    ``source.stack``): Python and torch, and LeRobot and transformers for a LeRobot policy."""
    out = {"python": ".".join(map(str, sys.version_info[:3])), "torch": package_version("torch")}
    for dist in ("lerobot", "transformers") if lerobot else ():
        version = package_version(dist)
        if version != "not installed":
            out[dist] = version
    return out


def _np(t: Any) -> np.ndarray:
    return np.ascontiguousarray(t.detach().cpu().numpy())


def _named_outputs(out: Any) -> dict[str, Any]:
    torch = _torch()
    if isinstance(out, torch.Tensor):
        return {"action": out}
    if isinstance(out, dict):
        return dict(out)
    if isinstance(out, (tuple, list)):
        return {("action" if i == 0 else f"output_{i}"): t for i, t in enumerate(out)}
    raise ExportError(f"the model returned {type(out).__name__}; expected a tensor, a tuple or a dict of tensors")


def _shape(t: Any) -> list[int]:
    return [int(d) for d in t.shape]


def _unbatched(model: Any) -> Any:
    """``model`` behind a module that takes unbatched inputs and returns unbatched outputs.

    The batch of one is added and removed inside the graph, so the program (and the wire) see the
    observation as a camera and a robot deliver it.
    """
    torch = _torch()

    class Unbatched(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            out = self.inner(*(x.unsqueeze(0) for x in inputs))
            if isinstance(out, torch.Tensor):
                return out[0]
            if isinstance(out, dict):
                return {k: v[0] for k, v in out.items()}
            return tuple(v[0] for v in out)

    return Unbatched(model).eval()


def _strip_batch(example: dict[str, Any], reference: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Checks that every input and output carries a leading batch of 1, and returns them without it."""
    for kind, tensors in (("input", example), ("output", reference)):
        for k, v in tensors.items():
            if v.dim() == 0 or v.shape[0] != 1:
                raise ExportError(
                    f"{kind} {k!r}: the action output has a leading batch dimension of 1, so every input and "
                    f"output must have one too (the program removes it); {k!r} has shape {_shape(v)}"
                )
    return {k: v[0] for k, v in example.items()}, {k: v[0] for k, v in reference.items()}


def input_role(name: str, t: Any, images: set[str] | None) -> str:
    """The role of an input: explicit image names win; else uint8 H x W x C frames and LeRobot's names."""
    torch = _torch()
    if images is not None:
        if name in images:
            return "image"
    elif (t.dtype == torch.uint8 and t.dim() == 3) or "image" in name:
        # LeRobot names camera inputs observation.image / observation.images.<camera>, float or not
        return "image"
    if "environment_state" in name:
        return "env"
    return "state" if "state" in name else "other"


def _tensor_dtype(kind: str, name: str, t: Any) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise ExportError(f"{kind} {name!r}: dtype {dtype} is not one a bundle carries ({', '.join(DTYPES)})")
    return dtype


def default_scale(reference: Any) -> tuple[tuple[float, ...], str]:
    """Without statistics: per joint, max(1, the reference's peak magnitude): relative for large values."""
    peak = np.abs(reference.reshape(-1, reference.shape[-1]).astype(np.float64)).max(axis=0)
    return tuple(float(v) for v in np.maximum(peak, 1.0)), "max(1, peak |reference| per joint)"


def reference_spread(
    model: Any, example: Mapping[str, Any], reference: Mapping[str, np.ndarray], scale: Mapping[str, tuple[float, ...]]
) -> float | None:
    """How far float32 rounding alone moves the reference: the model run at float64 against its float32
    outputs, in the case's units (the largest over the outputs). None when the model cannot run at float64.

    Every float32 tensor and dtype the model meets is taken at float64 (a torch function mode), so the
    weights, a processor's statistics and the explicit ``.to(torch.float32)`` casts of a policy's own code
    (LeRobot has many) all widen, and the model itself is left as it was.
    """
    torch = _torch()
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    def widen(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == torch.float32:
            return x.double()
        return torch.float64 if x is torch.float32 else x

    class Float64(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            args, kwargs = tree_map(widen, (args, kwargs or {}))
            return tree_map(widen, func(*args, **kwargs))

    try:
        with torch.no_grad(), Float64():
            got = _named_outputs(model(*example.values()))
    except Exception as e:  # a model that cannot run at float64 has no measured spread; the floor applies
        log.warning(
            "the reference's float32 rounding was not measured (the model does not run at float64: %s: %s)",
            type(e).__name__,
            e,
        )
        return None
    worst = 0.0
    for name, ref in reference.items():
        if name not in got:
            continue
        diff = np.abs(_np(got[name]).astype(np.float64) - ref.astype(np.float64))
        if name in scale:
            diff = diff / np.asarray(scale[name], dtype=np.float64)
        if diff.size:
            worst = max(worst, float(np.nan_to_num(diff, nan=np.inf).max()))
    return worst


@dataclass
class Trace:
    """A traced policy: its portable program, test case, specs and what the manifest needs to say of it."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    action_output: str
    action_names: tuple[str, ...]
    action_scale: tuple[float, ...]
    scale_source: str
    example: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    portable: bytes  # torch.export.save of the f32 program
    model_batch: int = 0
    spread: float | None = None  # reference_spread, in the case's units
    stack: dict[str, str] = field(default_factory=dict)  # stack_versions() where the trace ran
    # what export_bundle passes through to the manifest unchanged
    policy_name: str = "policy"
    description: str = ""
    source: dict[str, Any] = field(default_factory=dict)
    observation_history: int = 1
    language: dict[str, Any] | None = None
    rtc: dict[str, Any] | None = None
    exported: Any = None  # the ExportedProgram itself when traced in this process (not written)


def trace_policy(
    factory: str | Callable[[], tuple[Any, dict[str, Any]]],
    *,
    policy_name: str | None = None,
    action_names: tuple[str, ...] | None = None,
    image_inputs: tuple[str, ...] | None = None,
    action_scale: tuple[float, ...] | None = None,
    scale_source: str = "",
    source: Mapping[str, Any] | None = None,
    description: str = "",
    model_batch: int = 0,
    input_roles: Mapping[str, str] | None = None,
    observation_history: int = 1,
    language: Mapping[str, Any] | None = None,
    rtc: Mapping[str, Any] | None = None,
    steps: tuple[int, int] = (1, 2),
) -> Trace:
    """Build the model, record its eager reference and spread, check it, and ``torch.export`` it.

    A model whose action output carries a leading batch of 1 is wrapped so that the program takes and
    returns unbatched tensors (``model_batch: 1``). Shapes, dtypes and roles are checked right after the
    eager run, before the slow export. ``steps``: where these two steps stand in the whole export's count.
    """
    torch = _torch()
    fn = load_factory(factory) if isinstance(factory, str) else factory
    name = policy_name or getattr(fn, "__name__", "policy").removeprefix("make_")
    first, total = steps

    with step(first, total, "building the model and its eager reference"):
        made = fn()
        if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict)):
            raise ExportError("the factory must return (torch.nn.Module, dict[str, torch.Tensor])")
        model, example = made
        for k, v in example.items():
            if not isinstance(v, torch.Tensor):
                raise ExportError(f"example input {k!r}: expected a torch.Tensor, got {type(v).__name__}")
        model = model.eval()
        try:
            with torch.no_grad():
                reference = _named_outputs(model(*example.values()))
        except Exception as e:
            raise ExportError(
                f"the eager run failed: {type(e).__name__}: {e} (inputs: "
                + ", ".join(f"{k} {_shape(v)}" for k, v in example.items())
                + ")"
            ) from e
        for k, v in reference.items():
            if not isinstance(v, torch.Tensor):
                raise ExportError(f"output {k!r}: expected a torch.Tensor, got {type(v).__name__}")

        # Everything that can be wrong with shapes, dtypes and roles is found here, in seconds, not
        # after minutes of export and lowering.
        first_out = reference.get("action", next(iter(reference.values()), None))
        if first_out is not None and first_out.dim() == 3 and first_out.shape[0] == 1:
            example, reference = _strip_batch(example, reference)
            model = _unbatched(model)
            model_batch = 1
            log.info("the model takes a batch of one: the program adds and removes it, the wire stays unbatched")
        if image_inputs is not None:
            unknown = [i for i in image_inputs if i not in example]
            if unknown:
                raise ExportError(
                    f"--image-inputs: {', '.join(unknown)} is not an input (inputs: {', '.join(example)})"
                )
        for k, role in (input_roles or {}).items():
            if k not in example or role not in INPUT_ROLES:
                raise ExportError(
                    f"input roles: expected an input ({', '.join(example)}) with a role among "
                    f"{', '.join(INPUT_ROLES)}, got {k!r}: {role!r}"
                )
        images = set(image_inputs) if image_inputs is not None else None
        inputs = tuple(
            TensorSpec(
                k,
                _tensor_dtype("input", k, v),
                tuple(_shape(v)),
                (input_roles or {}).get(k) or input_role(k, v, images),
            )
            for k, v in example.items()
        )
        outputs = tuple(
            TensorSpec(k, _tensor_dtype("output", k, v), tuple(_shape(v)), "action" if k == "action" else "other")
            for k, v in reference.items()
        )
        action = next((o for o in outputs if o.role == "action"), None)
        if action is None or len(action.shape) != 2:
            shape = list(action.shape) if action else None
            raise ExportError(
                f"output 'action': expected a [chunk_length, action_dim] tensor (or [1, chunk_length, action_dim] "
                f"for a model with a batch dimension), got shape {shape}"
            )
        dim = action.shape[1]
        names = action_names or (SO101_JOINTS if dim == 6 else tuple(f"joint_{i}" for i in range(dim)))
        if len(names) != dim:
            raise ExportError(f"--action-names: the action has {dim} values per step, {len(names)} names given")
        if action_scale is not None and (len(action_scale) != dim or not all(v > 0 for v in action_scale)):
            raise ExportError(f"action scale: expected {dim} positive values, got {list(action_scale)}")
        ref_np = {k: _np(v) for k, v in reference.items()}
        if action_scale is None:
            action_scale, scale_source = default_scale(ref_np[action.name])
        spread = reference_spread(model, example, ref_np, {action.name: action_scale})
        if spread is not None:
            log.info(
                "the reference's float32 rounding: %.3g in units of %s (float32 against float64)", spread, scale_source
            )

    with step(first + 1, total, "exporting with torch.export"):
        # after the eager run, so the test case's reference comes from the model as written
        from runtime.export.group_norm import replace_group_norm

        replace_group_norm(model)
        try:
            # under no_grad, a policy's own @torch.no_grad (LeRobot's predict_action_chunk) changes
            # nothing and leaves no grad-mode submodule in the graph, which the quantizer cannot read
            with torch.no_grad():
                exported = torch.export.export(model, tuple(example.values()))
        except Exception as e:
            raise ExportError(f"torch.export failed: {type(e).__name__}: {e}") from e
        buf = io.BytesIO()
        torch.export.save(exported, buf)

    return Trace(
        inputs=inputs,
        outputs=outputs,
        action_output=action.name,
        action_names=tuple(names),
        action_scale=tuple(float(v) for v in action_scale),
        scale_source=scale_source,
        example={k: _np(v) for k, v in example.items()},
        reference=ref_np,
        portable=buf.getvalue(),
        model_batch=model_batch,
        spread=spread,
        stack=stack_versions(lerobot=(source or {}).get("kind") == "lerobot"),
        policy_name=name,
        description=description,
        source=dict(source or {}),
        observation_history=observation_history,
        language=dict(language) if language is not None else None,
        rtc=dict(rtc) if rtc is not None else None,
        exported=exported,
    )


def write_trace(trace: Trace, directory: str | Path) -> Path:
    """The trace as a directory: ``trace.json``, ``model.pt2`` and ``test_case.npz``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / PORTABLE_FILE).write_bytes(trace.portable)
    arrays = {f"input/{k}": v for k, v in trace.example.items()}
    arrays.update({f"output/{k}": v for k, v in trace.reference.items()})
    np.savez(d / TEST_CASE_FILE, **arrays)  # type: ignore[arg-type]
    meta = {k: v for k, v in asdict(trace).items() if k not in ("example", "reference", "portable", "exported")}
    meta["format"] = TRACE_FORMAT
    (d / TRACE_FILE).write_text(json.dumps(meta, indent=1))
    return d


def read_trace(directory: str | Path) -> Trace:
    """A trace written by :func:`write_trace` (possibly by another Python, torch or LeRobot)."""
    d = Path(directory)
    try:
        meta = json.loads((d / TRACE_FILE).read_text())
        with np.load(d / TEST_CASE_FILE, allow_pickle=False) as case:
            example = {k.removeprefix("input/"): case[k] for k in case.files if k.startswith("input/")}
            reference = {k.removeprefix("output/"): case[k] for k in case.files if k.startswith("output/")}
        portable = (d / PORTABLE_FILE).read_bytes()
    except (OSError, ValueError) as e:
        raise BundleError(f"{d}: not a complete trace ({TRACE_FILE}, {PORTABLE_FILE}, {TEST_CASE_FILE}): {e}") from e
    if meta.pop("format", None) != TRACE_FORMAT:
        raise BundleError(f"{d / TRACE_FILE}: field 'format': expected {TRACE_FORMAT} (written by another version)")
    meta["inputs"] = tuple(TensorSpec(s["name"], s["dtype"], tuple(s["shape"]), s["role"]) for s in meta["inputs"])
    meta["outputs"] = tuple(TensorSpec(s["name"], s["dtype"], tuple(s["shape"]), s["role"]) for s in meta["outputs"])
    for key in ("action_names", "action_scale"):
        meta[key] = tuple(meta[key])
    return Trace(example=example, reference=reference, portable=portable, **meta)
