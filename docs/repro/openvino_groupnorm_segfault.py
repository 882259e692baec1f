"""The smallest graph that crashes OpenVINO 2025.4.1's CPU compile_model (segmentation fault).

    x -> Relu -> GroupNormalization -> Add(., Relu output) -> result

A GroupNormalization whose input comes from an elementwise op (Relu here) that also feeds an
elementwise consumer of the GroupNormalization's output: a ResNet basic block with GroupNorm, as in
LeRobot's Diffusion Policy encoder (there with convolutions in between, which crashes the same way).
The crash happens inside the CPU plugin's snippets tokenization (a GraphRewrite matcher pass under
``compile_model``); with ``SNIPPETS_MODE=DISABLE`` the same graph compiles, and so does the same
arithmetic written with ReduceMean instead of GroupNormalization (what lerobot-runtime's exporter
does: runtime/export/group_norm.py). Seen with shapes [1, 4, 2, 2] (2 groups) up to
[2, 128, 10, 14] (8 groups); [2, 64, 20, 28] with 4 groups compiles.

Run each variant in its own process (a segfault ends the interpreter):

    python docs/repro/openvino_groupnorm_segfault.py groupnorm       # exit status 139 (SIGSEGV)
    python docs/repro/openvino_groupnorm_segfault.py snippets-off    # prints "compiled"
    python docs/repro/openvino_groupnorm_segfault.py reduce-mean     # prints "compiled"
"""

from __future__ import annotations

import sys

import numpy as np
import openvino as ov
from openvino import opset13 as ops

SHAPE = (1, 4, 2, 2)
GROUPS = 2
EPS = 1e-5


def model(variant: str) -> ov.Model:
    n, c = SHAPE[:2]
    x = ops.parameter(SHAPE, np.float32, name="x")
    relu = ops.relu(x)
    if variant == "reduce-mean":
        groups = ops.reshape(relu, ops.constant(np.array([n, GROUPS, -1], np.int64)), special_zero=False)
        axis = ops.constant(np.array([2], np.int64))
        centred = ops.subtract(groups, ops.reduce_mean(groups, axis, keep_dims=True))
        var = ops.reduce_mean(ops.multiply(centred, centred), axis, keep_dims=True)
        normed = ops.multiply(centred, ops.power(ops.add(var, np.float32(EPS)), np.float32(-0.5)))
        norm = ops.reshape(normed, ops.constant(np.array(SHAPE, np.int64)), special_zero=False)
    else:
        norm = ops.group_normalization(relu, np.ones(c, np.float32), np.zeros(c, np.float32), GROUPS, EPS)
    return ov.Model([ops.result(ops.add(norm, relu))], [x], "relu_groupnorm_add")


def main(variant: str) -> int:
    if variant not in ("groupnorm", "snippets-off", "reduce-mean"):
        print(__doc__)
        return 2
    config = {"SNIPPETS_MODE": "DISABLE"} if variant == "snippets-off" else {}
    print(f"openvino {ov.get_version()}: compiling {variant} for CPU ...", flush=True)
    compiled = ov.Core().compile_model(model(variant), "CPU", config)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    r = np.maximum(x, 0).reshape(SHAPE[0], GROUPS, -1)
    want = ((r - r.mean(-1, keepdims=True)) / np.sqrt(r.var(-1, keepdims=True) + EPS)).reshape(SHAPE) + np.maximum(x, 0)
    err = float(np.abs(compiled(x)[0] - want).max())
    print(f"compiled; max abs error against numpy {err:.2g}")
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
