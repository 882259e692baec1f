"""Loading a bundle into a ready engine: device choice, CPU pinning, parity gate, warm-up."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from runtime.bundle.bundle import Bundle
from runtime.bundle.manifest import Manifest
from runtime.bundle.pte import parse_program
from runtime.engine.affinity import inference_cpus, pin_current_thread
from runtime.engine.base import Engine
from runtime.engine.config import EngineConfig
from runtime.engine.devices import choose_device, cpu_flags, present_devices
from runtime.engine.openvino_engine import OpenVINOEngine, direct_engine_refusal
from runtime.engine.parity import ParityResult, PendingGate, run_parity
from runtime.errors import BundleError, ConfigError, ParityError
from runtime.versions import package_version

log = logging.getLogger(__name__)


@dataclass
class LoadReport:
    """How loading went: what was chosen and why, the parity result and the time each step took."""

    skipped_devices: tuple[str, ...] = ()
    engine_reason: str = ""
    parity: ParityResult | None = None
    timing_ms: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "skipped_devices": list(self.skipped_devices),
            "engine_reason": self.engine_reason,
            "parity": self.parity.to_json() if self.parity else None,
            "timing_ms": dict(self.timing_ms),
        }


def effective_cache_dir(config: EngineConfig) -> str:
    """``engine.cache_dir``, else systemd's ``$CACHE_DIRECTORY`` (the unit's CacheDirectory=), else none."""
    if config.cache_dir:
        return config.cache_dir
    systemd_dirs = os.environ.get("CACHE_DIRECTORY", "")
    return str(Path(systemd_dirs.split(":")[0]) / "openvino") if systemd_dirs else ""


def case_precision(engine: Engine) -> str:
    """The precision whose tolerance holds ``engine``'s outputs (as runtime.engine.parity.case_tolerance)."""
    program = engine.manifest.programs.get(engine.info.device)
    return "int8" if program is not None and program.precision == "int8" else engine.info.precision


def parity_remedy(manifest: Manifest) -> str:
    """What can change the outcome of a failed parity gate: only what would make it pass, nothing else."""
    basis = manifest.test_case.basis.get("f32")
    here = cpu_flags()
    override = (
        "engine.allow_parity_failure = true (--allow-parity-failure) serves it anyway, the canary then holding it "
        "to what it computes here"
    )
    if basis is None:
        return (
            "The bundle's f32 tolerance was not measured when it was exported: export it again (an export now "
            f"measures it and proves the bundle on the exporting machine); or {override}"
        )
    if basis.lowered_by and f"({here})" not in basis.lowered_by:
        return (
            f"The bundle was proved on another CPU ({basis.lowered_by}; this one: {here}): export it on this "
            f"machine, which measures its tolerance here; or {override}"
        )
    return f"Nothing in the bundle can change this on this machine; {override}"


def load_engine(config: EngineConfig, *, report: LoadReport | None = None, staged: bool = False) -> Engine:
    """Load the configured bundle, prove it against its test case and warm it up.

    Pins the calling thread to the inference CPU set first: run this on the thread that will run
    inference (threads OpenVINO starts inherit the set). Raises :class:`ParityError` when the program
    does not match its reference and ``allow_parity_failure`` is off.

    ``staged``: return once the first ``ready_runs`` replays passed, the others left in the engine's
    ``pending_gate`` for the caller to run before the engine computes anything else (the inference
    worker does, before its first request); they are then the warm-up too. Off: the whole gate here.
    """
    report = report if report is not None else LoadReport()
    if not config.bundle:
        # the built-in demo bundle is the callers' default (runtime.export.demo.with_bundle): exporting
        # it is no part of load time, and the engine knows nothing of how bundles are made
        raise ConfigError("engine.bundle: expected the path of a bundle directory, got none")
    path = Path(config.bundle).expanduser()
    t0 = time.perf_counter()
    bundle = Bundle.open(path)
    manifest = bundle.manifest

    cpus = inference_cpus(config.cpus, config.control_cpu)
    pin_current_thread(cpus)
    threads = config.threads or len(cpus)

    choice = choose_device(config.devices, present_devices(), manifest.programs, str(path))
    for reason in choice.skipped:
        log.info("device skipped: %s", reason)
    report.skipped_devices = choice.skipped
    device = choice.device
    entry = bundle.program(device)
    installed = package_version("openvino")
    if entry.openvino_version and entry.openvino_version != installed:
        raise BundleError(
            f"{path}: the {device} program was compiled by OpenVINO {entry.openvino_version}, this machine has "
            f"{installed}; a compiled blob only imports on the version that made it. Re-make it here with: "
            f"lerobot-runtime lower {path} --device {device}"
        )
    data = bundle.map_program(device)
    method = parse_program(data, str(path / entry.file))["forward"]
    t_open = time.perf_counter()  # the bundle verified, its program mapped and read
    precision = entry.precision if config.precision == "auto" else config.precision
    # an INT8 program whose gate ran its float layers at f32 because OpenVINO crashed at the default
    forced = manifest.int8_float_precision if entry.precision == "int8" and config.precision == "auto" else None

    refusal = direct_engine_refusal(method)
    kind = config.engine
    if kind == "auto":
        kind = "executorch" if refusal else "openvino"
        report.engine_reason = (
            f"auto: {refusal}, so executorch" if refusal else "auto: one OpenVINO delegate covers the program"
        )
    else:
        report.engine_reason = f"requested {kind}"

    engine: Engine
    if kind == "openvino":
        engine = OpenVINOEngine(
            manifest,
            method,
            device=device,
            bundle=str(path),
            program=entry.file,
            precision=forced or precision,
            threads=threads,
            cpus=cpus,
            cache_dir=effective_cache_dir(config),
            compiled_by=entry.openvino_version,
            program_precision=entry.precision,
        )
    else:
        from runtime.engine.executorch_engine import (
            ExecuTorchEngine,
            import_runtime,
            lower_arithmetic,
            lower_arithmetic_refusal,
        )

        import_runtime()  # a missing ExecuTorch install is said first, before anything about its arithmetic
        if forced:
            raise BundleError(
                f"{path}: this INT8 program's float layers are proven at {forced} only (OpenVINO crashed running "
                f"them at {manifest.int8_crashes or '?'} when it was quantised); the executorch engine runs them "
                "at the CPU's default and cannot be told otherwise. "
                'Use the openvino engine ([engine] engine = "openvino")'
            )
        read_back = ExecuTorchEngine.read_back(method, device)
        if lower_arithmetic(entry.precision, read_back[0]) and not config.accept_lower_arithmetic:
            raise BundleError(lower_arithmetic_refusal(str(path), device, entry.precision, read_back[0], refusal))
        engine = ExecuTorchEngine(
            manifest,
            # the verified bytes (ExecuTorch takes bytes only): reading the file itself, it would see
            # later changes to it
            bytes(data),
            method,
            device=device,
            bundle=str(path),
            program=entry.file,
            requested_precision=None if config.precision == "auto" else config.precision,
            cpus=cpus,
            program_precision=entry.precision,
            read_back=read_back,
        )
    # the buffer stays only as long as an engine needs it (the openvino engine holds its blob)
    del data, method
    t1 = time.perf_counter()
    info = engine.info
    log.info(
        "loaded %s: policy %s, engine %s (%s), device %s (%s), precision %s (asked %s), threads %d on CPUs %s",
        path,
        manifest.policy_name,
        info.engine,
        report.engine_reason,
        info.device,
        "preferred: " + ",".join(config.devices),
        info.precision,
        precision,
        info.threads,
        list(info.cpus),
    )

    case = bundle.test_case()
    # a gate that may fail and still serve is run whole: what it accepts becomes the canary's baseline
    first = min(config.ready_runs, config.parity_runs) if staged and not config.allow_parity_failure else 0
    first = first if first < config.parity_runs else 0
    parity = run_parity(engine, case, first or config.parity_runs)
    if first and not parity.ok:
        parity = replace(parity, runs=config.parity_runs)  # "on replay 2 of 16": the gate's replay it was
    t2 = time.perf_counter()
    report.parity = parity
    tolerance_said = manifest.test_case.describe_tolerance(case_precision(engine))
    if parity.ok:
        log.info(
            "parity ok%s: %s; tolerance %s",
            f" so far (the first {first} of {config.parity_runs} replays)" if first else "",
            parity.describe(),
            tolerance_said,
        )
    elif config.allow_parity_failure:
        # the canary holds the program to what it computes now: it watches for drift, and does not refuse a
        # few seconds later the error accepted here
        accepted = engine.infer({k: v.copy() for k, v in case.inputs.items()})
        case = replace(
            case,
            outputs={k: np.array(v, copy=True) for k, v in accepted.items()},
            baseline="what the program computed when it was loaded",
        )
        log.warning(
            "parity FAILED but allow_parity_failure is set; serving anyway: %s; tolerance %s. The canary now holds "
            "the program to what it computed at load",
            parity.describe(),
            tolerance_said,
        )
    else:
        engine.close()
        raise ParityError(
            f"{path}: the program does not reproduce its reference; refusing to serve: {parity.describe()}; "
            f"tolerance {tolerance_said}. {parity_remedy(manifest)}"
        )
    engine.test_case = case
    if first:
        engine.pending_gate = PendingGate(engine, case, first, config.parity_runs, parity)
    else:
        for _ in range(config.warmup_runs):
            engine.infer(case.inputs)
    t3 = time.perf_counter()
    report.timing_ms = {
        "open": (t_open - t0) * 1e3,
        "compile": (t1 - t_open) * 1e3,  # the backend's import of the program (OpenVINO's blob import)
        "load": (t1 - t0) * 1e3,
        "parity": (t2 - t1) * 1e3,
        "warmup": (t3 - t2) * 1e3,
        "ready": (t3 - t0) * 1e3,
    }
    if first:
        log.info(
            "ready in %.0f ms (load %.0f, parity %d of %d runs %.0f); the other %d replays run before the first chunk",
            report.timing_ms["ready"],
            report.timing_ms["load"],
            first,
            config.parity_runs,
            report.timing_ms["parity"],
            config.parity_runs - first,
        )
    else:
        log.info(
            "ready in %.0f ms (load %.0f, parity %d runs %.0f, warm-up %d runs %.0f)",
            report.timing_ms["ready"],
            report.timing_ms["load"],
            config.parity_runs,
            report.timing_ms["parity"],
            config.warmup_runs,
            report.timing_ms["warmup"],
        )
    return engine
