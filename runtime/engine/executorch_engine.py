"""The ExecuTorch engine: the ExecuTorch runtime with its OpenVINO delegate.

Runs any program, including ones with ops left on ExecuTorch's portable kernels. ExecuTorch 1.5.1
imports the delegate blob with no OpenVINO properties, so the device's arithmetic precision and the
thread count are whatever the plugin chooses (the thread count follows the loading thread's CPU
affinity). A program lowered for bf16 or f16 carries that precision in its graph, so it runs at it
here too. Both are read back by importing the same blob the way the backend does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from runtime.bundle.manifest import Manifest
from runtime.bundle.pte import MethodInfo
from runtime.engine import ovlib
from runtime.engine.base import Engine, EngineInfo
from runtime.engine.openvino_engine import import_blob
from runtime.engine.poison import poison, unwritten, unwritten_message
from runtime.engine.precision import executed_precision, lower_of
from runtime.errors import BundleError, InferenceError, MissingDependencyError
from runtime.log import one_line

log = logging.getLogger(__name__)

_DTYPE_TO_SCALAR = {"uint8": 0, "int8": 1, "int32": 3, "int64": 4, "float16": 5, "float32": 6, "bool": 11}


def _import_failure(ov: Any, method: MethodInfo, device: str) -> str | None:
    """OpenVINO's reason for refusing the method's blob, found by importing it directly."""
    blobs = [d for d in method.delegates if d.backend_id == "OpenvinoBackend"]
    if not blobs:
        return None
    try:
        compiled, blob = import_blob(ov.Core(), blobs[0].payload, device, {})
    except RuntimeError as e:
        return str(e)
    del compiled, blob
    return None


def lower_arithmetic(program_precision: str, arithmetic: str) -> bool:
    """True when the device would compute a float program less exactly than it was lowered
    (int8 programs are held to their accuracy gate, whatever precision runs their float layers)."""
    return program_precision != "int8" and lower_of(arithmetic, program_precision) != program_precision


def lower_arithmetic_refusal(
    where: str, device: str, program_precision: str, arithmetic: str, direct_refusal: str | None
) -> str:
    """The one-line refusal of an executorch load that would compute below the program's precision."""
    first = (
        f"the openvino engine cannot run this program ({direct_refusal}), so lower it for {arithmetic}"
        if direct_refusal
        else f"--engine openvino, which runs it at {program_precision}"
    )
    return (
        f"{where}: the executorch engine would compute this {program_precision} program at {arithmetic} on "
        f"{device} (OpenVINO's {device} default here, and ExecuTorch 1.5.1's backend passes OpenVINO no "
        f"precision); refusing rather than serving {arithmetic} arithmetic unasked. Ways out: {first}; a "
        f"{arithmetic} program (lerobot-runtime lower BUNDLE --precision {arithmetic}); or "
        f"engine.accept_lower_arithmetic = true (--accept-lower-arithmetic) to serve it at {arithmetic}, "
        f"held to the {arithmetic} tolerance"
    )


def import_runtime() -> tuple[Any, Any, Any]:
    try:
        import torch
        from executorch.runtime import Runtime, Verification
    except ImportError as e:
        raise MissingDependencyError(
            f"the executorch engine needs the ExecuTorch runtime ({e}); install it with "
            "pip install 'lerobot-runtime[executorch]', or use --engine openvino"
        ) from e
    return torch, Runtime, Verification


class ExecuTorchEngine(Engine):
    def __init__(
        self,
        manifest: Manifest,
        source: bytes | memoryview | Path,
        method: MethodInfo,
        *,
        device: str,
        bundle: str,
        program: str,
        requested_precision: str | None,
        cpus: list[int],
        program_precision: str = "f32",
        read_back: tuple[str, int] | None = None,
    ) -> None:
        """``requested_precision``: a precision asked for at load, which this engine cannot apply
        (said in the log when the device runs another); ``program_precision``: what the program was
        lowered at, which it carries in its graph; ``read_back``: :meth:`read_back` of the same method
        and device when the caller already has it (importing a large blob takes seconds)."""
        import openvino as ov

        torch, Runtime, Verification = import_runtime()
        rt = Runtime.get()
        if not rt.backend_registry.is_available("OpenvinoBackend"):
            raise MissingDependencyError(
                "ExecuTorch's OpenVINO backend is not available in this executorch build; install "
                "'executorch[openvino]' and openvino (or set OPENVINO_LIB_PATH to libopenvino_c.so)"
            )
        self._torch = torch
        try:
            self._program = rt.load_program(source, verification=Verification.Minimal)
            self._method = self._program.load_method("forward")
        except RuntimeError as e:
            # The backend frees its OpenVINO core right after a failed import, which clears the C
            # API's message; importing the same blob directly reproduces the failure with its text.
            reason = ovlib.last_error_message() or _import_failure(ov, method, device)
            raise BundleError(
                f"{bundle}/{program}: ExecuTorch could not load method 'forward': {e}"
                + (f"; OpenVINO says: {one_line(reason)}" if reason else "")
            ) from e
        self._check_signature(manifest, self._method.metadata, f"{bundle}/{program}")
        self._output_names = [o.name for o in manifest.outputs]
        # The public Method.execute returns copies, so its output buffers cannot be marked before a
        # run; the native method underneath hands out views of them (clone_outputs=False).
        self._native = self._method._method
        self._output_views = [t.numpy() for t in self._native.get_outputs(clone_outputs=False)]

        arithmetic, threads = read_back or self.read_back(method, device)
        if requested_precision and requested_precision != lower_of(program_precision, arithmetic):
            log.warning(
                "engine executorch cannot apply INFERENCE_PRECISION_HINT=%s: ExecuTorch's OpenVINO backend "
                "passes no properties at load, so %s computes at %s; lower the bundle for that precision "
                "(lerobot-runtime lower BUNDLE --precision %s) or use --engine openvino",
                requested_precision,
                device,
                arithmetic,
                requested_precision,
            )
        elif lower_arithmetic(program_precision, arithmetic):
            log.warning(
                "%s computes this %s program at %s (the plugin's default, which ExecuTorch's OpenVINO backend "
                "cannot change), as engine.accept_lower_arithmetic allows: the parity gate holds it to the %s "
                "tolerance; --engine openvino runs it at %s",
                device,
                program_precision,
                arithmetic,
                arithmetic,
                program_precision,
            )
        elif arithmetic != program_precision and program_precision in ("bf16", "f16"):
            log.info(
                "%s has no native %s arithmetic: the program's %s weights and activations are computed in %s",
                device,
                program_precision,
                program_precision,
                arithmetic,
            )
        if device == "CPU" and threads > len(cpus):
            log.warning(
                "OpenVINO's CPU plugin was set up before inference was pinned to CPUs %s: the executorch "
                "engine will run %d threads on them (load the engine first in a fresh process, or use "
                "--engine openvino, which sets the thread count)",
                cpus,
                threads,
            )
        info = EngineInfo(
            engine="executorch",
            device=device,
            precision=lower_of(program_precision, arithmetic),
            arithmetic=arithmetic,
            threads=threads,
            cpus=tuple(cpus),
            bundle=bundle,
            program=program,
            openvino_version=ov.get_version(),
        )
        super().__init__(manifest, info)

    @staticmethod
    def read_back(method: MethodInfo, device: str) -> tuple[str, int]:
        """Arithmetic precision and threads the backend really runs with: import the blob as it does,
        with no properties, and read OpenVINO's execution graph. Needs OpenVINO only, not ExecuTorch."""
        import openvino as ov

        blobs = [d for d in method.delegates if d.backend_id == "OpenvinoBackend"]
        if not blobs:
            return "f32", 0  # nothing delegated: portable kernels, single-threaded float32
        compiled, blob = import_blob(ov.Core(), blobs[0].payload, device, {})
        precision = executed_precision(compiled)
        threads = int(compiled.get_property("INFERENCE_NUM_THREADS")) if device == "CPU" else 0
        del compiled, blob
        return precision, threads

    @staticmethod
    def _check_signature(manifest: Manifest, meta: Any, where: str) -> None:
        if meta.num_inputs() != len(manifest.inputs) or meta.num_outputs() != len(manifest.outputs):
            raise BundleError(
                f"{where}: program has {meta.num_inputs()} inputs / {meta.num_outputs()} outputs, "
                f"manifest declares {len(manifest.inputs)} / {len(manifest.outputs)}"
            )
        for i, spec in enumerate(manifest.inputs):
            info = meta.input_tensor_meta(i)
            if tuple(info.sizes()) != spec.shape or info.dtype() != _DTYPE_TO_SCALAR.get(spec.dtype):
                raise BundleError(
                    f"{where}: input {spec.name!r}: manifest says {spec.dtype}{list(spec.shape)}, program takes {info}"
                )

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        tensors = [self._torch.from_numpy(a) for a in arrays]  # zero-copy
        for view in self._output_views:
            poison(view)  # see runtime.engine.poison: no stale chunk served
        try:
            outputs = self._native.call(tensors, clone_outputs=False)
        except RuntimeError as e:
            reason = ovlib.last_error_message()
            detail = f"OpenVINO says: {reason}" if reason else f"no OpenVINO message ({e})"
            raise self._failed(f"{e}; {detail}", reason) from e
        result = {name: t.numpy().copy() for name, t in zip(self._output_names, outputs, strict=True)}
        for name, value in result.items():
            missing = unwritten(value)
            if missing:
                reason = ovlib.last_error_message() or unwritten_message(name, missing, value.size)
                raise self._failed(f"OpenVINO says: {reason}", reason)
        return result

    def _failed(self, detail: str, reason: str | None) -> InferenceError:
        log.error(
            "inference failed: bundle %s, program %s, device %s, method forward: %s",
            self.info.bundle,
            self.info.program,
            self.info.device,
            detail,
        )
        return InferenceError(
            f"inference failed (bundle {self.info.bundle}, device {self.info.device}, method forward): {detail}",
            backend_reason=reason,
        )

    def close(self) -> None:
        self._output_views = []
        self._native = None
        self._method = None
        self._program = None
