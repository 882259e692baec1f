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
import sys
import time
from collections.abc import Callable, Iterator
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
    FileEntry,
    Manifest,
    ProgramEntry,
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
    try:
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
) -> Bundle:
    """Export, lower for ``device``, record the eager test case and write the bundle to ``out``."""
    torch = _torch()
    fn = load_factory(factory) if isinstance(factory, str) else factory
    name = policy_name or getattr(fn, "__name__", "policy").removeprefix("make_")
    check_device_present(device)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
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
        with torch.no_grad():
            reference = _named_outputs(model(*example.values()))
    with step(2, total, "exporting with torch.export"):
        try:
            exported = torch.export.export(model, tuple(example.values()))
        except Exception as e:
            raise ExportError(f"torch.export failed: {type(e).__name__}: {e}") from e
        buf = io.BytesIO()
        torch.export.save(exported, buf)
        portable = buf.getvalue()
        (out_dir / PORTABLE_FILE).write_bytes(portable)
    with step(3, total, f"lowering to OpenVINO for {device}"):
        data = lower_program(exported, device, input_names=tuple(example), output_names=tuple(reference))
        file = f"program_{device.lower()}.pte"
        (out_dir / file).write_bytes(data)
        program = _program_entry(data, device, file, precision)
    with step(4, total, "writing the test case and manifest"):
        images = (
            set(image_inputs)
            if image_inputs is not None
            else {k for k, v in example.items() if v.dtype == torch.uint8 and v.dim() == 3}
        )
        inputs = tuple(
            TensorSpec(
                k,
                str(v.dtype).removeprefix("torch."),
                tuple(v.shape),
                "image" if k in images else ("state" if "state" in k else "other"),
            )
            for k, v in example.items()
        )
        outputs = tuple(
            TensorSpec(k, str(v.dtype).removeprefix("torch."), tuple(v.shape), "action" if k == "action" else "other")
            for k, v in reference.items()
        )
        action = next((o for o in outputs if o.role == "action"), None)
        if action is None or len(action.shape) != 2:
            shape = list(action.shape) if action else None
            raise ExportError(f"output 'action': expected a [chunk_length, action_dim] tensor, got shape {shape}")
        chunk, dim = action.shape
        names = action_names or (SO101_JOINTS if dim == 6 else tuple(f"joint_{i}" for i in range(dim)))
        if len(names) != dim:
            raise ExportError(f"--action-names: the action has {dim} values per step, {len(names)} names given")
        arrays = {f"input/{k}": _np(v) for k, v in example.items()}
        arrays.update({f"output/{k}": _np(v) for k, v in reference.items()})
        case = io.BytesIO()
        np.savez(case, **arrays)  # type: ignore[arg-type]
        (out_dir / TEST_CASE_FILE).write_bytes(case.getvalue())
        manifest = Manifest(
            policy_name=name,
            inputs=inputs,
            outputs=outputs,
            action_output=action.name,
            chunk_length=chunk,
            action_names=tuple(names),
            control_rate_hz=float(control_rate_hz),
            programs={device: program},
            test_case=TestCaseEntry(TEST_CASE_FILE, sha256_bytes(case.getvalue()), dict(DEFAULT_TOLERANCE)),
            portable_program=FileEntry(PORTABLE_FILE, sha256_bytes(portable)),
            tools=tool_versions(),
            created_utc=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        )
        manifest.write(out_dir)
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
    with step(1, 2, f"loading {m.portable_program.file}"):
        exported = torch.export.load(str(bundle.path / m.portable_program.file))
    with step(2, 2, f"lowering to OpenVINO for {device}"):
        data = lower_program(
            exported,
            device,
            input_names=tuple(s.name for s in m.inputs),
            output_names=tuple(s.name for s in m.outputs),
        )
    file = f"program_{device.lower()}.pte"
    (bundle.path / file).write_bytes(data)
    any_precision = next(iter(m.programs.values())).precision if m.programs else "f32"
    entry = _program_entry(data, device, file, precision or any_precision)
    programs = dict(m.programs)
    programs[device] = entry
    replace(m, programs=programs).write(bundle.path)
    log.info("added %s program %s to %s", device, file, bundle.path)
    return Bundle.open(bundle.path, verify_all=True)
