"""``lerobot-runtime quantize``: post-training INT8 of a bundle, calibrated on recorded observations.

The bundle's portable program is quantised with ExecuTorch's own OpenVINO quantizer (NNCF under the
hood, INT8 weights and activations, the transformer preset) and lowered as usual, so the result is
a ``.pte`` bundle like any other and both engines run it.

Nothing is served before an accuracy gate: the observations are split into a calibration set and a
held-out set, and the INT8 program's action error against the float program on the held-out set,
in the bundle's normalised units, must stay within a bound. The result is recorded in the manifest
(``quantization``) and ``check`` reports it. The bundle's own test case is too little to calibrate
on (one observation): calibration needs real observations, recorded from the robot.
"""

from __future__ import annotations

import datetime as _dt
import gc
import io
import logging
import os
import shutil
import sys
import zipfile
from collections.abc import Mapping
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import numpy as np

from runtime.bundle.bundle import Bundle, sha256_bytes
from runtime.bundle.manifest import HISTORY_ROLES, FileEntry, Manifest, TestCaseEntry, describe_crashes
from runtime.engine.validate import validate_inputs
from runtime.errors import ExportError, InputValidationError, ParityError, RecordingError
from runtime.export.shared_weights import reshare_weights, unshare_weights
from runtime.export.weight_folding import fold_weight_quantization
from runtime.export.weight_views import weights_of_their_own
from runtime.recording.layout import INFO_PATH

log = logging.getLogger(__name__)

# Largest INT8-vs-float action error accepted on held-out observations, in normalised action units:
# no joint target of any step may move by more than 0.2 std of that joint's motion in the training data.
DEFAULT_MAX_ERROR: Final = 0.2
MIN_OBSERVATIONS: Final = 4
DEFAULT_DATASET_FRAMES: Final = 256  # frames sampled from a LeRobot dataset to calibrate and hold out


def load_observations(
    source: str | Path, manifest: Manifest, *, max_frames: int = DEFAULT_DATASET_FRAMES
) -> list[dict[str, np.ndarray]]:
    """Observations to calibrate on and hold out, validated against the bundle's inputs.

    ``source`` is either a LeRobot dataset (v3.0: ``meta/info.json``, parquet tables and videos, as
    LeRobot or ``lerobot-runtime record`` write it), sampled evenly over all its episodes up to
    ``max_frames`` frames, or a directory of ``.npz`` files, one observation each, arrays named as the
    bundle's inputs (``input/<name>``, the test case's layout, is accepted too). An input that the
    recording lacks but the server fills itself (Diffusion Policy's ``noise``) is filled with seeded
    noise; real-time chunking's prefix inputs, as the server fills them for a request without a
    leftover (zero weights: the plain flow). An error names the file or frame and the input.
    """
    root = Path(source)
    if (root / INFO_PATH).is_file():
        found, kind = _dataset_observations(root, manifest, max_frames), "sampled dataset"
    elif root.is_dir():
        found, kind = _npz_observations(root), ".npz"
    else:
        raise ExportError(
            f"--calibration: {root} is neither a LeRobot dataset (no {INFO_PATH}) nor a directory of recorded "
            "observations (.npz files)"
        )
    if len(found) < MIN_OBSERVATIONS:
        raise ExportError(
            f"--calibration: {root} holds {len(found)} {kind} observation(s); at least {MIN_OBSERVATIONS} are needed "
            "(some calibrate, the rest are held out for the accuracy gate); a few hundred from real runs is right"
        )
    rng = np.random.default_rng(0)
    no_prefix = _no_prefix(manifest)
    out = []
    for where, arrays in found:
        for spec in manifest.noise_inputs:
            if spec.name not in arrays:
                arrays[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
        for name, value in no_prefix.items():
            arrays.setdefault(name, value)
        try:
            ordered = validate_inputs(manifest.inputs, arrays)
        except InputValidationError as e:
            raise ExportError(f"--calibration: {where}: {e}") from e
        out.append({spec.name: a for spec, a in zip(manifest.inputs, ordered, strict=True)})
    return out


def _no_prefix(manifest: Manifest) -> dict[str, np.ndarray]:
    """A real-time chunking policy's prefix inputs for a request without a leftover; {} for others."""
    rtc = manifest.rtc
    if rtc is None:
        return {}
    joints = len(manifest.action_names)
    return {
        rtc.prefix_input: np.zeros((rtc.chunk_size, joints), np.float32),
        rtc.weights_input: np.zeros(rtc.chunk_size, np.float32),
        rtc.guidance_input: np.array([rtc.max_guidance_weight], np.float32),
    }


def _npz_observations(root: Path) -> list[tuple[str, dict[str, np.ndarray]]]:
    found = []
    for f in sorted(root.glob("*.npz")):
        try:  # opened here, so a file numpy cannot read is closed too
            with f.open("rb") as fh, np.load(fh, allow_pickle=False) as npz:
                arrays = {k.removeprefix("input/"): npz[k] for k in npz.files if not k.startswith("output/")}
        except (OSError, ValueError, zipfile.BadZipFile) as e:  # a pickled array, a file cut short, not an .npz
            raise ExportError(f"--calibration: {f}: not an .npz of plain arrays ({type(e).__name__}: {e})") from e
        found.append((str(f), arrays))
    return found


def _dataset_observations(root: Path, manifest: Manifest, max_frames: int) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Every ``stride``-th frame of every episode, spread so that about ``max_frames`` are taken.

    A policy that looks at several observations (the manifest's ``observation_history``, LeRobot's
    ``n_obs_steps``) gets that many frames up to the sampled one for each observation input, the
    first repeated at an episode's start as LeRobot's observation queue does.
    """
    from runtime.recording.reader import DatasetReader

    if max_frames < MIN_OBSERVATIONS:
        raise ExportError(f"--calibration-frames: expected at least {MIN_OBSERVATIONS}, got {max_frames}")
    try:
        reader = DatasetReader(root)
    except (RecordingError, KeyError, ValueError) as e:
        raise ExportError(f"--calibration: {root}: not a readable LeRobot dataset: {e}") from e
    total = int(reader.info.get("total_frames", 0))
    stride = max(1, -(-total // max_frames))
    wanted = {s.name: s for s in manifest.inputs}
    history = manifest.observation_history
    stacked = {s.name for s in manifest.inputs if history > 1 and s.role in HISTORY_ROLES}
    found: list[tuple[str, dict[str, np.ndarray]]] = []
    for index in range(reader.num_episodes):
        length = reader.episode_length(index)
        picks = list(range(0, length, stride))[: max_frames - len(found)]
        if not picks:
            break
        keep = sorted({max(0, j - k) for j in picks for k in range(history)})
        try:
            episode = reader.episode(index, keep=keep)
        except (RecordingError, ValueError, OSError) as e:
            raise ExportError(f"--calibration: {root}: episode {index}: {e}") from e
        slot = {j: i for i, j in enumerate(keep)}
        for j in picks:
            arrays: dict[str, np.ndarray] = {}
            for name, column in episode.columns.items():
                if name in wanted:
                    arrays[name] = _frames(column, j, history if name in stacked else 1)
            for name, frames in episode.images.items():
                if name in wanted:
                    arrays[name] = _frames(frames, j, history if name in stacked else 1, slot)
            found.append((f"{root} episode {episode.index} frame {j}", arrays))
    return found


def _frames(values: np.ndarray, frame: int, n: int, slot: Mapping[int, int] | None = None) -> np.ndarray:
    """Frame ``frame`` of ``values`` (``slot`` maps frame numbers to rows), or with ``n > 1`` the ``n``
    frames ending there, stacked, the episode's first repeated before its start."""
    row = (lambda f: slot[f]) if slot is not None else (lambda f: f)
    if n == 1:
        return np.array(values[row(frame)])  # a copy: table columns are read-only, torch wants writable arrays
    return np.stack([np.asarray(values[row(max(0, frame - n + 1 + k))]) for k in range(n)])


def action_error(got: np.ndarray, ref: np.ndarray, scale: tuple[float, ...] | None) -> np.ndarray:
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    return diff / np.asarray(scale, dtype=np.float64) if scale else diff


def boolean_consumers(module: Any) -> list[str]:
    """The graph's nodes that take a boolean tensor (masks), which the quantizer must leave alone."""
    import torch

    def boolean(a: Any) -> bool:
        return isinstance(a, torch.fx.Node) and getattr(a.meta.get("val"), "dtype", None) == torch.bool

    return [n.name for n in module.graph.nodes if n.op == "call_function" and any(boolean(a) for a in n.args)]


# The matrix products whose second operand can be a stored constant (``x @ C``)
_MATRIX_PRODUCTS: Final = ("matmul", "mm", "bmm")


def input_channel_weights(module: Any) -> list[str]:
    """The graph's matrix products ``x @ C`` with a stored constant ``C`` [..., K, N], which the quantizer
    must leave float.

    NNCF scales such a constant per slice of its first axis, as if it were ``nn.Linear``'s [N, K]
    weight; here that axis is K, the one the product sums over. OpenVINO's CPU plugin makes a
    compressed-weight FullyConnected of it with a scale per input channel, which OpenVINO 2025.4.1
    runs wrong at f32 (NaN or ~1e31) and crashes at bf16 on an AMX CPU (SIGFPE, a division by a zero
    block size; 2026.4.1 still crashes at bf16): docs/repro/openvino_int8_input_channel_scale_sigfpe.py.
    SmolVLA's image resize is such a product (runtime/export/lerobot/smolvla.py). ``nn.Linear``
    layers (``linear``/``addmm``, weight [N, K]) are not, and a constant first operand (``C @ x``,
    scaled per output row) neither."""
    import torch

    products = {getattr(torch.ops.aten, name).default for name in _MATRIX_PRODUCTS}

    def constant(a: Any) -> bool:
        return isinstance(a, torch.fx.Node) and a.op == "get_attr"

    return [
        n.name
        for n in module.graph.nodes
        if n.op == "call_function" and n.target in products and len(n.args) > 1 and constant(n.args[1])
    ]


def quantize_bundle(
    bundle_path: str | Path,
    calibration: str | Path,
    out: str | Path,
    *,
    max_error: float = DEFAULT_MAX_ERROR,
    held_out_fraction: float = 0.25,
    calibration_frames: int = DEFAULT_DATASET_FRAMES,
) -> Bundle:
    """Write an INT8 copy of the bundle at ``out``, or refuse it (nothing written) when the gate fails."""
    from runtime.export.export import _program_entry, lower_program, staged_directory, tool_versions
    from runtime.export.trace import PORTABLE_FILE, TEST_CASE_FILE, _torch, step

    torch = _torch()
    try:
        from executorch.backends.openvino.quantizer import QuantizationMode, quantize_model
    except ImportError as e:
        raise ExportError(f"quantizing needs ExecuTorch's OpenVINO quantizer and nncf ({e})") from e
    for handler in logging.getLogger("nncf").handlers:  # NNCF logs to stdout, which belongs to --json
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)
    if not 0 < held_out_fraction < 1:
        raise ExportError(f"--held-out: expected a fraction between 0 and 1, got {held_out_fraction}")
    src = Bundle.open(bundle_path, verify_all=True)
    m = src.manifest
    if m.portable_program is None:
        raise ExportError(f"{bundle_path}: no portable program (model.pt2) to quantise; re-export the bundle")
    if "CPU" not in m.programs or m.programs["CPU"].precision != "f32":
        have = {d: p.precision for d, p in m.programs.items()}
        raise ExportError(f"{bundle_path}: quantising starts from an f32 CPU program; the bundle has {have}")
    observations = load_observations(calibration, m, max_frames=calibration_frames)
    n_held = max(1, round(len(observations) * held_out_fraction))
    calib, held = observations[:-n_held], observations[-n_held:]
    case = src.test_case()
    scale = case.scale.get(m.action_output)
    total = 4

    with step(1, total, f"calibrating INT8 on {len(calib)} observations"):
        exported = torch.export.load(str(src.path / m.portable_program.file))
        example = tuple(torch.from_numpy(case.inputs[s.name]) for s in m.inputs)
        data = [tuple(torch.from_numpy(o[s.name]) for s in m.inputs) for o in calib]
        bias_correction = True

        def run(exported: Any, data: list[tuple[Any, ...]], **options: Any) -> Any:
            module = exported.module()
            weights_of_their_own(module)  # else attention's packed projections stay float (weight_views.py)
            unshare_weights(module)  # else a second camera's backbone stays float (shared_weights.py)
            # NNCF would collect statistics on boolean inputs (SmolVLA's attention masks into
            # torch.where) and fails on them ("mean(): ... Got: Bool"): a mask is not quantised; nor
            # is a constant that NNCF would scale along the axis the product sums over
            ignored = boolean_consumers(module) + input_channel_weights(module)
            if ignored:
                import nncf

                options["extra_quantizer_options"] = {"ignored_scope": nncf.IgnoredScope(names=ignored, validate=False)}
            # the quantizer prints its progress; stdout belongs to the command's result (--json)
            with redirect_stdout(sys.stderr):
                # NNCF's own folding does not scale to a default-size SmolVLA (weight_folding.py)
                quantized = quantize_model(
                    module,
                    data,
                    mode=QuantizationMode.INT8_TRANSFORMER,
                    subset_size=len(data),
                    fold_quantize=False,
                    **options,
                )
            fold_weight_quantization(quantized)  # the weights leave as INT8 constants, each quantised once
            reshare_weights(quantized)  # the uses quantised alike read one INT8 constant
            return quantized

        try:
            try:
                quantized = run(exported, data)
            except TypeError as e:
                # NNCF 3.2's fast bias correction fails on layers fed unbatched 1-D tensors
                # ("iteration over a 0-d tensor"); quantise without it rather than not at all
                log.warning("NNCF bias correction failed (%s); quantising without it", e)
                bias_correction = False
                quantized = run(exported, data, fast_bias_correction=None)
            with torch.no_grad():
                q_exported = torch.export.export(quantized, example)
        except Exception as e:
            raise ExportError(f"INT8 quantisation failed: {type(e).__name__}: {e}") from e
        # the f32 program, its unshared copy and the calibration inputs are not needed past this point:
        # a default-size SmolVLA's are several GB, and the lowering and the gate's two compiled programs
        # come next in the same process
        del exported, quantized, data
        gc.collect()

    with staged_directory(Path(out)) as stage:
        with step(2, total, "lowering the INT8 program for CPU"):
            # with OpenVINO's snippets where they import: the INT8 program's attention and element-wise
            # layers fused (compile_precision.py)
            program = lower_program(q_exported, "CPU", snippets=True)
            file = "program_cpu.pte"
            (stage / file).write_bytes(program)
            entry = _program_entry(program, "CPU", file, "int8")
            del program
            buf = io.BytesIO()
            torch.export.save(q_exported, buf)
            portable_sha = sha256_bytes(buf.getbuffer())
            (stage / PORTABLE_FILE).write_bytes(buf.getbuffer())
            del q_exported, buf
            gc.collect()
        with step(3, total, f"accuracy gate on {len(held)} held-out observations"):
            # the bundle's own test case too: the INT8 bundle's load-time parity replays it against this bound
            gate = accuracy_gate(src, stage, file, [*held, case.inputs], scale, case.scale_source, max_error)
        with step(4, total, "writing the test case and manifest"):
            shutil.copyfile(src.path / m.test_case.file, stage / TEST_CASE_FILE)
            if m.language is not None:  # a language policy's tokenizer goes along, unchanged
                shutil.copyfile(src.path / m.language.tokenizer.file, stage / m.language.tokenizer.file)
            tolerance = dict(m.test_case.tolerance)
            tolerance["int8"] = max_error
            manifest = replace(
                m,
                programs={"CPU": entry},
                test_case=TestCaseEntry(
                    TEST_CASE_FILE, m.test_case.sha256, tolerance, dict(m.test_case.scale), m.test_case.scale_source
                ),
                portable_program=FileEntry(PORTABLE_FILE, portable_sha),
                tools=tool_versions(),
                created_utc=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
                quantization={
                    "method": "NNCF post-training INT8 (ExecuTorch OpenVINO quantizer, INT8_TRANSFORMER)",
                    "calibration": str(Path(calibration).resolve()),
                    "calibration_observations": len(calib),
                    "bias_correction": bias_correction,
                    "from_bundle": str(src.path.resolve()),
                    "gate": gate,
                },
            )
            manifest.write(stage)
            Bundle.open(stage, verify_all=True)
    log.info(
        "INT8 bundle written to %s: held-out action error max %.3g, mean %.3g %s (bound %.3g)",
        out,
        gate["max_error"],
        gate["mean_error"],
        gate["units"],
        max_error,
    )
    return Bundle.open(out, verify_all=True)


class NativeCrash(Exception):
    """The process that ran a program was killed by a signal (OpenVINO's native code crashed)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def _run_blob(program: str, props: dict[str, Any], inputs: list[str], index: int, obs_dir: str, out: str) -> None:
    """In a child process: run the delegate of ``program`` with ``props`` on each ``obs_dir/<k>.npz``,
    and write output ``index`` of each (``out``, arrays ``0``, ``1``...) and the arithmetic it ran at."""
    import openvino as ov

    from runtime.bundle.pte import parse_program
    from runtime.engine.openvino_engine import import_blob
    from runtime.engine.precision import executed_precision

    method = parse_program(Path(program).read_bytes(), program)["forward"]
    compiled, _ = import_blob(ov.Core(), bytes(method.delegates[0].payload), "CPU", props)
    request = compiled.create_infer_request()
    results: dict[str, np.ndarray] = {"arithmetic": np.array(executed_precision(compiled))}
    for k, f in enumerate(sorted(Path(obs_dir).glob("*.npz"), key=lambda f: int(f.stem))):
        with np.load(f, allow_pickle=False) as obs:
            results[str(k)] = np.array(request.infer([obs[name] for name in inputs])[index], copy=True)
    np.savez(out, **results)  # type: ignore[arg-type]


def run_isolated(target: Any, *args: Any) -> None:
    """Run ``target(*args)`` in a fresh Python process; NativeCrash when a signal killed it, ExportError
    when it failed otherwise. Native crashes of the program under test end that process, not this one.

    ``target`` is a module-level function and ``args`` JSON values. A plain interpreter, not
    multiprocessing's spawn, which would re-run the caller's unguarded script in the child."""
    import json
    import signal
    import subprocess

    code = (
        "import importlib, json, sys; "
        "getattr(importlib.import_module(sys.argv[1]), sys.argv[2])(*json.loads(sys.argv[3]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    command = [sys.executable, "-c", code, target.__module__, target.__qualname__, json.dumps(list(args))]
    status = subprocess.run(command, env=env, check=False).returncode
    if status < 0:
        raise NativeCrash(signal.Signals(-status).name)
    if status != 0:
        raise ExportError(f"running the INT8 program in a child process failed (exit status {status}); see its output")


def int8_outputs(
    program: Path, held: list[dict[str, np.ndarray]], inputs: list[str], index: int, props: dict[str, Any], work: Path
) -> tuple[list[np.ndarray], str]:
    """The INT8 program's action for each held-out observation, run in a child process with ``props``,
    and the arithmetic its float layers ran at. NativeCrash when OpenVINO crashed it."""
    obs_dir = work / "observations"
    if not obs_dir.is_dir():
        obs_dir.mkdir(parents=True)
        for k, obs in enumerate(held):
            np.savez(obs_dir / f"{k}.npz", **{name: obs[name] for name in inputs})  # type: ignore[arg-type]
    out = work / "outputs.npz"
    out.unlink(missing_ok=True)
    run_isolated(_run_blob, str(program), props, inputs, index, str(obs_dir), str(out))
    with np.load(out, allow_pickle=False) as got:
        return [got[str(k)] for k in range(len(held))], str(got["arithmetic"])


# What the INT8 program's float layers are tried at, in order: the CPU's default (bf16 where the CPU
# has it natively), then f32. OpenVINO 2025.4.1's CPU plugin crashed (SIGFPE, a division by a zero
# block size) running a default-size SmolVLA's INT8 program with bf16 float layers on an AMX CPU: the
# image resize's product by a constant, quantised per input channel, which input_channel_weights now
# keeps float; the f32 try stays for a crash not known yet.
FLOAT_TRIES: Final[tuple[tuple[str | None, dict[str, Any]], ...]] = (
    (None, {}),
    ("f32", {"INFERENCE_PRECISION_HINT": "f32"}),
)


def first_that_runs(run: Any, default: str) -> tuple[list[np.ndarray], str, str | None, dict[str, str]]:
    """``run(props)`` with each of FLOAT_TRIES until one does not crash: its outputs, the arithmetic
    it ran at, the precision asked (None: the CPU's default, named ``default``) and what crashed
    before it, by precision. ExportError when every try crashed."""
    import openvino as ov

    crashed: dict[str, str] = {}
    for asked, props in FLOAT_TRIES:
        try:
            got, arithmetic = run(props)
        except NativeCrash as e:
            tried = asked or default
            crashed[tried] = e.signal_name
            log.warning("the INT8 program crashed OpenVINO (%s) with its float layers at %s", e.signal_name, tried)
            continue
        return got, arithmetic, asked, crashed
    tried = describe_crashes(crashed)
    raise ExportError(
        f"INT8 refused: the INT8 program crashes OpenVINO {ov.get_version()} on this CPU with its float layers "
        f"at every precision tried ({tried}); keep the float bundle"
    )


def accuracy_gate(
    src: Bundle,
    stage: Path,
    file: str,
    held: list[dict[str, np.ndarray]],
    scale: tuple[float, ...] | None,
    units: str,
    max_error: float,
) -> dict[str, Any]:
    """INT8 (``stage/file``) vs the float program of ``src`` on ``held``; ParityError over the bound.

    The INT8 program runs in a child process, first with its float layers at the CPU's default, then,
    if OpenVINO crashed on it, at f32: the gate records what ran (``float_precision`` when it is not
    the default, which the engines then apply) and what crashed. ExportError when every try crashed."""
    import tempfile

    import openvino as ov

    from runtime.bundle.pte import parse_program
    from runtime.engine.openvino_engine import import_blob
    from runtime.engine.precision import ov_precision_name

    m = src.manifest
    name = m.action_output
    index = [o.name for o in m.outputs].index(name)
    inputs = [s.name for s in m.inputs]

    method = parse_program(src.read_program("CPU"), m.programs["CPU"].file)["forward"]
    core = ov.Core()
    compiled, _ = import_blob(core, bytes(method.delegates[0].payload), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    reference = [np.array(request.infer([o[n] for n in inputs])[index], copy=True) for o in held]
    del request, compiled

    default = ov_precision_name(str(core.get_property("CPU", "INFERENCE_PRECISION_HINT")))
    with tempfile.TemporaryDirectory(prefix="lerobot-runtime-gate-") as work:
        got, arithmetic, asked, crashed = first_that_runs(
            lambda props: int8_outputs(stage / file, held, inputs, index, props, Path(work)), default
        )
    errors = [action_error(g, r, scale) for g, r in zip(got, reference, strict=True)]
    worst = max(float(e.max()) for e in errors)
    mean = float(np.mean([e.mean() for e in errors]))
    gate: dict[str, Any] = {
        "held_out_observations": len(held),
        "max_error": worst,
        "mean_error": mean,
        "bound": max_error,
        "units": units,
        "ok": worst <= max_error,
        "float_arithmetic": arithmetic,  # what the INT8 program's float layers ran at
    }
    if crashed:
        gate["crashed"] = crashed
        gate["float_precision"] = asked
    if not worst <= max_error:
        raise ParityError(
            f"INT8 refused: on {len(held)} held-out observations the INT8 program's action differs from the float "
            f"program's by up to {worst:.3g} (mean {mean:.3g}) in units of {units}; the bound is {max_error:.3g}. "
            "Calibrate on more (and more varied) recorded observations, or raise --max-error knowingly"
        )
    return gate


def gate_summary(quantization: Mapping[str, Any]) -> str:
    g = quantization.get("gate", {})
    if not g:
        return ""
    summary = (
        f"INT8 gate: max {g.get('max_error', float('nan')):.3g}, mean {g.get('mean_error', float('nan')):.3g} "
        f"in units of {g.get('units', '?')} on {g.get('held_out_observations', '?')} held-out observations "
        f"(bound {g.get('bound', float('nan')):.3g})"
    )
    if g.get("crashed"):
        crashed = describe_crashes(g["crashed"])
        summary += f"; float layers at {g.get('float_precision')} (OpenVINO crashed at {crashed})"
    return summary
