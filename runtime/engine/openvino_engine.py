"""The direct OpenVINO engine: the delegate blob out of the ``.pte``, imported with properties.

For programs that are a single OpenVINO delegate from inputs to outputs, this skips the ExecuTorch
runtime (and torch) entirely and, unlike ExecuTorch 1.5.1, can apply INFERENCE_PRECISION_HINT,
INFERENCE_NUM_THREADS, CPU pinning, the latency hint and a cache dir.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from runtime.bundle.manifest import Manifest
from runtime.bundle.pte import OPENVINO_BACKEND_ID, MethodInfo
from runtime.engine.base import Engine, EngineInfo
from runtime.engine.poison import poison, unwritten, unwritten_message
from runtime.engine.precision import OV_HINT, executed_precision, lower_of
from runtime.errors import BundleError, InferenceError
from runtime.log import one_line

log = logging.getLogger(__name__)


def import_blob(core: Any, payload: bytes | memoryview, device: str, props: dict[str, Any]) -> tuple[Any, Any]:
    """Import an OpenVINO blob; returns the compiled model and what must stay alive with it.

    A memoryview (a slice of the memory-mapped program) is handed over as a shared tensor, so the
    weights are not copied on the way in; OpenVINO may keep reading that memory, so the caller holds
    the returned tensor as long as the compiled model.
    """
    if isinstance(payload, memoryview):
        import openvino as ov

        tensor = ov.Tensor(np.frombuffer(payload, dtype=np.uint8), shared_memory=True)
        return core.import_model(tensor, device, props), tensor
    return core.import_model(payload, device, props), None


def direct_engine_refusal(method: MethodInfo) -> str | None:
    """Why the direct engine cannot run ``method``, or None when it can."""
    if method.kernel_ops:
        ops = ", ".join(sorted(set(method.kernel_ops)))
        return f"ops left on ExecuTorch kernels: {ops}"
    if len(method.delegates) != 1:
        return f"{len(method.delegates)} delegates (the direct engine runs exactly one)"
    if method.delegates[0].backend_id != OPENVINO_BACKEND_ID:
        return f"delegate is {method.delegates[0].backend_id}, not {OPENVINO_BACKEND_ID}"
    if not method.single_delegate:
        return "the delegate call does not map the method's inputs straight to its outputs"
    return None


class OpenVINOEngine(Engine):
    def __init__(
        self,
        manifest: Manifest,
        method: MethodInfo,
        *,
        device: str,
        bundle: str,
        program: str,
        precision: str | None,
        threads: int,
        cpus: list[int],
        cache_dir: str = "",
        compiled_by: str = "",
        program_precision: str = "f32",
    ) -> None:
        """``precision``: the INFERENCE_PRECISION_HINT to apply (None: the plugin's default);
        ``program_precision``: what the program was lowered at; ``compiled_by``: the OpenVINO version
        the manifest says compiled the blob ("" if unknown)."""
        import openvino as ov

        refusal = direct_engine_refusal(method)
        if refusal:
            raise BundleError(f"{bundle}/{program}: the openvino engine cannot run this program: {refusal}")
        blob_device = method.delegates[0].device
        if blob_device and blob_device != device:
            raise BundleError(f"{bundle}/{program}: the delegate was compiled for {blob_device}, not {device}")
        props: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
        hint = OV_HINT[precision] if precision else None
        if hint:
            props["INFERENCE_PRECISION_HINT"] = hint
        if device == "CPU":
            props["INFERENCE_NUM_THREADS"] = threads
            # Off on purpose: with it on, OpenVINO moves the calling thread to cores of its own choosing
            # at every inference, whatever its affinity (measured: onto the control CPU). The loading
            # thread is pinned to the inference CPUs instead, and that pin holds.
            props["ENABLE_CPU_PINNING"] = False
        elif cache_dir:
            props["CACHE_DIR"] = cache_dir
        core = ov.Core()
        try:
            compiled, self._blob = import_blob(core, method.delegates[0].payload, device, props)
        except RuntimeError as e:
            installed = ov.get_version()
            relower = f"lerobot-runtime lower {bundle} --device {device}"
            if compiled_by and installed.split("-")[0] == compiled_by.split("-")[0]:
                why = (
                    f"the blob is damaged (OpenVINO {compiled_by} compiled it, the same version as here); "
                    f"make it again from the bundle's portable program: {relower}"
                )
            else:
                why = (
                    "either the blob is damaged or another OpenVINO version compiled it (the manifest does "
                    f"not say which); make it again here: {relower}"
                )
            raise BundleError(
                f"{bundle}/{program}: OpenVINO {installed} could not import the {device} blob: {why}. "
                f"OpenVINO says: {one_line(str(e))}"
            ) from e
        self._check_signature(manifest, compiled, f"{bundle}/{program}")
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        self._output_names = [o.name for o in manifest.outputs]
        threads_back = int(compiled.get_property("INFERENCE_NUM_THREADS")) if device == "CPU" else 0
        arithmetic = executed_precision(compiled)
        info = EngineInfo(
            engine="openvino",
            device=device,
            precision=lower_of(program_precision, arithmetic),
            arithmetic=arithmetic,
            threads=threads_back,
            cpus=tuple(cpus),
            bundle=bundle,
            program=program,
            openvino_version=ov.get_version(),
        )
        super().__init__(manifest, info)

    @staticmethod
    def _check_signature(manifest: Manifest, compiled: Any, where: str) -> None:
        if len(compiled.inputs) != len(manifest.inputs) or len(compiled.outputs) != len(manifest.outputs):
            raise BundleError(
                f"{where}: program has {len(compiled.inputs)} inputs / {len(compiled.outputs)} outputs, "
                f"manifest declares {len(manifest.inputs)} / {len(manifest.outputs)}"
            )
        for spec, port in zip(manifest.inputs, compiled.inputs, strict=True):
            partial = port.get_partial_shape()
            if not partial.is_static:
                continue  # dynamic dimensions: the manifest's static shape is one the program accepts
            shape = tuple(int(d) for d in port.get_shape())
            if shape != spec.shape:
                raise BundleError(
                    f"{where}: input {spec.name!r}: manifest shape {list(spec.shape)}, program shape {list(shape)}"
                )

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        req = self._request
        for i in range(len(self._output_names)):
            poison(req.get_output_tensor(i).data)  # see runtime.engine.poison: no stale chunk served
        try:
            # share_inputs: OpenVINO reads the caller's buffers in place (no copy of a camera frame)
            results = req.infer(arrays, share_inputs=True)
        except RuntimeError as e:
            raise self._failed(str(e).strip()) from e
        # to_tuple keeps output order; copy so the next inference cannot overwrite a returned chunk
        values = results.to_tuple()
        outputs = {name: np.array(v, copy=True) for name, v in zip(self._output_names, values, strict=True)}
        for name, value in outputs.items():
            missing = unwritten(value)
            if missing:
                raise self._failed(unwritten_message(name, missing, value.size))
        return outputs

    def _failed(self, reason: str) -> InferenceError:
        log.error(
            "inference failed: bundle %s, program %s, device %s, method forward: %s",
            self.info.bundle,
            self.info.program,
            self.info.device,
            reason,
        )
        return InferenceError(
            f"inference failed (bundle {self.info.bundle}, device {self.info.device}, method forward): {reason}",
            backend_reason=reason,
        )

    def close(self) -> None:
        self._request = None
        self._compiled = None
        self._blob = None
