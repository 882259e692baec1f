"""An INT8-weight MatMul whose scale varies along the axis it contracts: SIGFPE at bf16, wrong at f32.

    x [M, K] (f32) -> MatMul(x, transpose(Convert(W_int8 [N, K]) * scale [1, K])) -> result

OpenVINO's CPU plugin turns a MatMul with an INT8 constant weight, converted and multiplied by a
scale, into a compressed-weight ``FullyConnected`` (weight decompression). With the scale per
*output* channel (shape [N, 1]) it computes the right thing. With the scale per *input* channel
(shape [1, K], one value per column that the product sums over, a decompression "group" of one
element) OpenVINO 2025.4.1 on an Intel Xeon with AMX (Sapphire Rapids: avx512_bf16 avx512_fp16
amx_bf16 amx_tile amx_int8) fails both ways:

- at bf16 (``INFERENCE_PRECISION_HINT=bf16``, the plugin's default on such a CPU) the first
  inference dies with SIGFPE, an integer division by a zero block size (one or two inference
  threads; seen with K = 32 (N = 512), 64, 96, 128, 640; not with K = 16 or 48);
- at f32 it runs and returns garbage: NaN for K = 640, values around 1e31 for K = 64.

NNCF produces exactly this pattern for ``torch.matmul(x, C)`` with a constant ``C`` of shape [K, N]:
it takes the constant's first axis for the output channel, as for ``nn.Linear``'s [N, K] weight, so
the scales follow K. LeRobot's SmolVLA resizes its camera images with such a product (the bilinear
column map, 640 x 512 at its default size), which is how a default-size SmolVLA's INT8 program
crashed at bf16 and ran wrong at f32. lerobot-runtime's ``quantize`` keeps those products float
(runtime/export/quantize.py, ``input_channel_weights``).

Each case runs in a child process (a SIGFPE ends the interpreter); the parent prints one line per
case and exits 1 when any case crashed or was wrong, 0 (and "ok") when all ran right:

    python docs/repro/openvino_int8_input_channel_scale_sigfpe.py
    python docs/repro/openvino_int8_input_channel_scale_sigfpe.py CASE   # one case, in this process

Cases: ``input-channel-bf16``, ``input-channel-f32`` (the bug), ``output-channel-bf16`` (the same
weight quantised per output channel: runs right, the control).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import openvino as ov
from openvino import opset13 as ops

M, K, N = 8, 640, 512  # SmolVLA's default image width 640 resized to 512, a few rows
CASES = ("input-channel-bf16", "input-channel-f32", "output-channel-bf16")
TOLERANCE = {"bf16": 0.05, "f32": 1e-4}  # of the largest output


def model(per: str) -> tuple[ov.Model, np.ndarray]:
    """The MatMul with an INT8 weight scaled per ``input`` or ``output`` channel, and the weight it means."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((N, K)).astype(np.float32)
    axis = 0 if per == "input" else 1  # the scale is the largest magnitude over the other axis
    scale = (np.abs(weight).max(axis=axis, keepdims=True) / 127).astype(np.float32)
    w8 = np.clip(np.round(weight / scale), -127, 127).astype(np.int8)
    x = ops.parameter((M, K), np.float32, name="x")
    w = ops.multiply(ops.convert(ops.constant(w8), np.float32), ops.constant(scale))
    y = ops.matmul(x, w, transpose_a=False, transpose_b=True)
    return ov.Model([ops.result(y)], [x], f"int8_weight_scale_per_{per}_channel"), w8.astype(np.float32) * scale


def run(case: str) -> int:
    per, _, precision = case.partition("-channel-")
    m, weight = model(per)
    config = {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": 1}
    compiled = ov.Core().compile_model(m, "CPU", config)
    x = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    got = compiled(x)[0]
    want = x @ weight.T
    err = float(np.nanmax(np.abs(got - want)) / np.abs(want).max()) if not np.isnan(got).all() else float("nan")
    if not err <= TOLERANCE[precision]:
        print(f"{case}: wrong: max error {err:.3g} of the largest output, {int(np.isnan(got).sum())} NaN")
        return 1
    print(f"{case}: ok (max error {err:.2g} of the largest output)")
    return 0


def main() -> int:
    cpu = ov.Core().get_property("CPU", "FULL_DEVICE_NAME")
    print(f"openvino {ov.get_version()} on {cpu}; x [{M}, {K}] times INT8 weight [{N}, {K}]", flush=True)
    failed = 0
    for case in CASES:
        status = subprocess.run([sys.executable, __file__, case], check=False).returncode
        if status < 0:
            print(f"{case}: crashed: {signal.Signals(-status).name}", flush=True)
        failed += status != 0
    if failed:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        if sys.argv[1] not in CASES:
            print(__doc__)
            sys.exit(2)
        sys.exit(run(sys.argv[1]))
    sys.exit(main())
