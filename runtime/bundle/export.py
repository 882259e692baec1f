"""Exporting a PyTorch policy into a bundle, and lowering its portable program for another device.

``FUNC()`` returns ``(torch.nn.Module, dict[str, torch.Tensor])``: the model and named example inputs
in forward-argument order. The example inputs become the bundle's test case, with the eager PyTorch
outputs as the reference.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.util
import io
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from drivers.calibration import SO101_JOINTS
from runtime import __version__
from runtime.bundle.bundle import Bundle, sha256_bytes
from runtime.bundle.lowering_checks import check_lowered, enforce
from runtime.bundle.manifest import (
    DEFAULT_TOLERANCE,
    DEVICES,
    DTYPES,
    INPUT_ROLES,
    PRECISIONS,
    FileEntry,
    LanguageEntry,
    Manifest,
    ProgramEntry,
    RtcEntry,
    TensorSpec,
    TestCaseEntry,
)
from runtime.bundle.pte import parse_program
from runtime.engine.devices import present_devices
from runtime.errors import DeviceError, ExportError, MissingDependencyError
from runtime.versions import package_version as _version

log = logging.getLogger(__name__)

PORTABLE_FILE = "model.pt2"
TEST_CASE_FILE = "test_case.npz"


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


def tool_versions() -> dict[str, str]:
    return {
        "lerobot_runtime": __version__,
        "torch": _version("torch"),
        "executorch": _version("executorch"),
        "openvino": _version("openvino"),
        "nncf": _version("nncf"),
        "python": ".".join(map(str, sys.version_info[:3])),
    }


def check_device_present(device: str) -> None:
    if device not in DEVICES:
        raise DeviceError(f"--device: expected one of {', '.join(DEVICES)}, got {device!r}")
    present = present_devices()
    if device not in present:
        raise DeviceError(
            f"OpenVINO does not see a {device} on this machine (it sees: {', '.join(present) or 'none'}). "
            f"OpenVINO compiles only for devices that are present: lower the {device} program on the machine "
            f"that has it, with: lerobot-runtime lower BUNDLE --device {device}"
        )


def lower_program(
    exported: Any, device: str, *, input_names: tuple[str, ...] = (), output_names: tuple[str, ...] = ()
) -> bytes:
    """torch ExportedProgram -> ``.pte`` bytes with the graph delegated to OpenVINO on ``device``.

    Refuses (:class:`ExportError`) a program OpenVINO is known to run with wrong results and no error,
    and warns about one it may (:mod:`runtime.bundle.lowering_checks`); the messages use the
    program's input and output names when given.
    """
    try:
        from executorch.backends.openvino.partitioner import OpenvinoPartitioner
        from executorch.exir import to_edge_transform_and_lower
        from executorch.exir.backend.compile_spec_schema import CompileSpec
    except ImportError as e:
        raise MissingDependencyError(
            f"lowering needs executorch with its OpenVINO backend and nncf ({e}): pip install 'lerobot-runtime[export]'"
        ) from e
    from runtime.bundle.compile_precision import cpu_lowering_precision
    from runtime.bundle.scalar_constants import scalar_bf16_constants

    try:
        # OpenVINO's frontend cannot make a 0-d bf16 constant itself; a CPU blob compiled at bf16 on an
        # AMX CPU keeps fused bf16 MLPs that crash one-thread imports
        with scalar_bf16_constants(), cpu_lowering_precision():
            edge = to_edge_transform_and_lower(
                exported, partitioner=[OpenvinoPartitioner([CompileSpec("device", device.encode())])]
            )
    except Exception as e:
        raise ExportError(f"lowering for {device} failed: {type(e).__name__}: {e}") from e
    enforce(check_lowered(edge, device, input_names, output_names), f"the {device} program")
    try:
        return bytes(edge.to_executorch().buffer)
    except Exception as e:
        raise ExportError(f"lowering for {device} failed: {type(e).__name__}: {e}") from e


def _program_entry(data: bytes, device: str, file: str, precision: str) -> ProgramEntry:
    method = parse_program(data, file)["forward"]
    delegation: Literal["full", "partial"] = "full" if method.single_delegate else "partial"
    if method.kernel_ops:
        log.warning(
            "%s: %d op(s) stay on ExecuTorch's portable kernels (%s); the openvino engine cannot run "
            "this program, the executorch engine will",
            file,
            len(method.kernel_ops),
            ", ".join(sorted(set(method.kernel_ops))),
        )
    return ProgramEntry(device, file, precision, sha256_bytes(data), delegation, _version("openvino"))


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


_TORCH_DTYPE = {"bf16": "bfloat16", "f16": "float16"}


def at_precision(model: Any, precision: str) -> Any:
    """``model`` computing at ``precision`` (bf16 or f16), with the same float32 inputs and outputs.

    Traced under ``torch.autocast``: matrix products and convolutions take their weights and inputs
    cast to ``precision`` and what follows them runs at it, while the ops autocast keeps in float32
    (softmax, norms, reductions) stay there, as a device's own low-precision mode does. The casts are
    ops of the graph, so the lowered program carries its precision whatever the engine passes at load
    (ExecuTorch's OpenVINO backend passes nothing). On a device without native arithmetic of that
    type, OpenVINO widens the values and computes in f32: the rounding of the casts stays.
    """
    torch = _torch()
    dtype = getattr(torch, _TORCH_DTYPE[precision])

    class AtPrecision(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            with torch.autocast("cpu", dtype=dtype):
                out = self.inner(*inputs)
            return torch.utils._pytree.tree_map(
                lambda v: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v, out
            )

    wrapper = AtPrecision(model)
    wrapper.training = False  # not .eval(): a module unlifted from a saved export refuses train()
    return wrapper


def export_for_lowering(model: Any, example: tuple[Any, ...], precision: str) -> Any:
    """The ExportedProgram to lower for ``precision``: ``model`` itself for f32, else cast (see at_precision)."""
    torch = _torch()
    if precision not in _TORCH_DTYPE:
        with torch.no_grad():
            return torch.export.export(model, example)
    with torch.no_grad():
        exported = torch.export.export(at_precision(model, precision), example).run_decompositions({})
    _unify_operand_dtypes(exported.graph_module)
    return exported


def _unify_operand_dtypes(gm: Any) -> None:
    """Cast the float operands of an op to its result's dtype where autocast left them mixed.

    Autocast keeps some weights float32 beside low-precision activations (``layer_norm`` takes a bf16
    input with float32 weight and bias and returns bf16); PyTorch's kernels accept that, ExecuTorch's
    edge dialect does not. The cast is what the kernel does anyway: it computes in the input's dtype.
    """
    torch = _torch()
    graph = gm.graph
    floats = {torch.float32, torch.float16, torch.bfloat16, torch.float64}

    def dtype_of(x: Any) -> Any:
        val = x.meta.get("val") if hasattr(x, "meta") else None
        return val.dtype if isinstance(val, torch.Tensor) else None

    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is torch.ops.aten._to_copy.default:
            continue
        out = node.meta.get("val")
        out = out[0] if isinstance(out, (tuple, list)) and out else out
        if not isinstance(out, torch.Tensor) or out.dtype not in floats:
            continue
        operands = [a for a in node.all_input_nodes if dtype_of(a) in floats]
        if len({dtype_of(a) for a in operands}) < 2:
            continue
        for arg in operands:
            if dtype_of(arg) == out.dtype:
                continue
            with graph.inserting_before(node):
                cast = graph.call_function(torch.ops.aten._to_copy.default, (arg,), {"dtype": out.dtype})
            cast.meta["val"] = arg.meta["val"].to(out.dtype)
            node.replace_input_with(arg, cast)
    graph.lint()
    gm.recompile()


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


def parse_tolerance(text: str) -> dict[str, float]:
    """``"f32=1e-4,bf16=0.05"`` -> {"f32": 1e-4, "bf16": 0.05}; names the bad entry."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        prec, sep, value = part.partition("=")
        try:
            tol = float(value)
        except ValueError:
            tol = -1.0
        if not sep or prec not in PRECISIONS or not tol >= 0:
            raise ExportError(
                f"--tolerance: expected PRECISION=NUMBER entries with a precision among {', '.join(PRECISIONS)} "
                f"and a non-negative number, got {part!r}"
            )
        out[prec] = tol
    return out


@contextmanager
def staged_directory(out_dir: Path) -> Iterator[Path]:
    """A sibling directory to write into; it replaces ``out_dir`` only when the block succeeds.

    A failed export leaves nothing behind, and an existing bundle at ``out_dir`` stays as it was.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        out_dir.rename(old)
    stage.rename(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_bundle(
    factory: str | Callable[[], tuple[Any, dict[str, Any]]],
    out: str | Path,
    *,
    device: str = "CPU",
    precision: str = "f32",
    policy_name: str | None = None,
    action_names: tuple[str, ...] | None = None,
    control_rate_hz: float = 30.0,
    image_inputs: tuple[str, ...] | None = None,
    tolerance: Mapping[str, float] | None = None,
    action_scale: tuple[float, ...] | None = None,
    scale_source: str = "",
    source: Mapping[str, Any] | None = None,
    description: str = "",
    model_batch: int = 0,
    input_roles: Mapping[str, str] | None = None,
    observation_history: int = 1,
    language: Mapping[str, Any] | None = None,
    rtc: Mapping[str, Any] | None = None,
) -> Bundle:
    """Export, lower for ``device``, record the eager test case and write the bundle to ``out``.

    A model whose action output carries a leading batch of 1 is wrapped so that the program takes and
    returns unbatched tensors (``model_batch: 1`` in the manifest). Shapes, dtypes and roles are
    checked right after the eager run, before the slow steps; nothing is left at ``out`` on failure.
    ``action_scale`` (one value per joint, e.g. the action's std) makes the parity tolerance relative.
    ``input_roles`` names roles outright (``noise``: drawn by the server per request); the others
    are inferred. ``observation_history`` is the number of frames every image, state and env input
    carries as its leading axis. ``language`` (a policy that takes a task string): the tokenizer
    ``definition`` (tokenizer.json text) and the LanguageEntry fields but the file. ``rtc`` (a policy
    that takes the previous chunk's leftover): the RtcEntry fields.
    """
    torch = _torch()
    fn = load_factory(factory) if isinstance(factory, str) else factory
    name = policy_name or getattr(fn, "__name__", "policy").removeprefix("make_")
    check_device_present(device)
    if precision not in PRECISIONS or precision == "int8":
        raise ExportError(
            f"--precision: expected one of f32, f16, bf16 (int8 comes from lerobot-runtime quantize), got {precision!r}"
        )
    out_dir = Path(out)
    total = 4

    with step(1, total, "building the model and its eager reference"):
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
        first = reference.get("action", next(iter(reference.values()), None))
        if first is not None and first.dim() == 3 and first.shape[0] == 1:
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
        chunk, dim = action.shape
        names = action_names or (SO101_JOINTS if dim == 6 else tuple(f"joint_{i}" for i in range(dim)))
        if len(names) != dim:
            raise ExportError(f"--action-names: the action has {dim} values per step, {len(names)} names given")
        if action_scale is not None and (len(action_scale) != dim or not all(v > 0 for v in action_scale)):
            raise ExportError(f"action scale: expected {dim} positive values, got {list(action_scale)}")
        ref_np = {k: _np(v) for k, v in reference.items()}
        if action_scale is None:
            action_scale, scale_source = default_scale(ref_np[action.name])
        tol = dict(DEFAULT_TOLERANCE)
        tol.update(tolerance or {})

    with staged_directory(out_dir) as stage:
        with step(2, total, "exporting with torch.export"):
            # after the eager run, so the test case's reference comes from the model as written
            from runtime.bundle.group_norm import replace_group_norm

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
            portable = buf.getvalue()
            (stage / PORTABLE_FILE).write_bytes(portable)
        with step(3, total, f"lowering to OpenVINO for {device} ({precision})"):
            if precision in _TORCH_DTYPE:
                try:
                    exported = export_for_lowering(model, tuple(example.values()), precision)
                except Exception as e:
                    raise ExportError(f"torch.export at {precision} failed: {type(e).__name__}: {e}") from e
            data = lower_program(exported, device, input_names=tuple(example), output_names=tuple(reference))
            file = f"program_{device.lower()}.pte"
            (stage / file).write_bytes(data)
            program = _program_entry(data, device, file, precision)
        with step(4, total, "writing the test case and manifest"):
            arrays = {f"input/{k}": _np(v) for k, v in example.items()}
            arrays.update({f"output/{k}": v for k, v in ref_np.items()})
            case = io.BytesIO()
            np.savez(case, **arrays)  # type: ignore[arg-type]
            (stage / TEST_CASE_FILE).write_bytes(case.getvalue())
            language_entry = None
            if language is not None:
                from runtime.bundle.tokenizer import TOKENIZER_FILE

                definition = str(language["definition"]).encode()
                (stage / TOKENIZER_FILE).write_bytes(definition)
                fields = {k: v for k, v in language.items() if k != "definition"}
                language_entry = LanguageEntry(FileEntry(TOKENIZER_FILE, sha256_bytes(definition)), **fields)
            manifest = Manifest(
                policy_name=name,
                description=description,
                inputs=inputs,
                outputs=outputs,
                action_output=action.name,
                chunk_length=chunk,
                action_names=tuple(names),
                control_rate_hz=float(control_rate_hz),
                programs={device: program},
                test_case=TestCaseEntry(
                    TEST_CASE_FILE, sha256_bytes(case.getvalue()), tol, {action.name: action_scale}, scale_source
                ),
                portable_program=FileEntry(PORTABLE_FILE, sha256_bytes(portable)),
                tools=tool_versions(),
                created_utc=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
                source=dict(source or {}),
                model_batch=model_batch,
                observation_history=observation_history,
                language=language_entry,
                rtc=RtcEntry(**rtc) if rtc is not None else None,
            )
            manifest.write(stage)
            Bundle.open(stage, verify_all=True)
    log.info("bundle written to %s (%s program: %s delegation)", out_dir, device, program.delegation)
    return Bundle.open(out_dir, verify_all=True)


def lower_bundle(path: str | Path, device: str, *, precision: str | None = None) -> Bundle:
    """Add a program for ``device`` to the bundle, lowered from its portable ``.pt2`` on this machine."""
    torch = _torch()
    bundle = Bundle.open(path, verify_all=True)
    m = bundle.manifest
    if m.portable_program is None:
        raise ExportError(f"{path}: the bundle has no portable_program (.pt2) to lower from; re-export it")
    check_device_present(device)
    any_precision = next(iter(m.programs.values())).precision if m.programs else "f32"
    at = precision or any_precision
    with step(1, 2, f"loading {m.portable_program.file}"):
        exported = torch.export.load(str(bundle.path / m.portable_program.file))
        if at in _TORCH_DTYPE:
            # the portable program is float32 (an int8 bundle's is already quantised): cast it to the
            # precision the program carries
            case = bundle.test_case()
            example = tuple(torch.from_numpy(case.inputs[s.name]) for s in m.inputs)
            try:
                exported = export_for_lowering(exported.module(), example, at)
            except Exception as e:
                raise ExportError(f"torch.export at {at} failed: {type(e).__name__}: {e}") from e
    with step(2, 2, f"lowering to OpenVINO for {device} ({at})"):
        data = lower_program(
            exported,
            device,
            input_names=tuple(s.name for s in m.inputs),
            output_names=tuple(s.name for s in m.outputs),
        )
    file = f"program_{device.lower()}.pte"
    (bundle.path / file).write_bytes(data)
    entry = _program_entry(data, device, file, at)
    programs = dict(m.programs)
    programs[device] = entry
    replace(m, programs=programs).write(bundle.path)
    log.info("added %s program %s to %s", device, file, bundle.path)
    return Bundle.open(bundle.path, verify_all=True)
