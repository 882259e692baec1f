"""Which precision a loaded program really runs at, measured rather than taken from a setting.

Two things decide it. The program: a bundle lowered for bf16 or f16 carries that precision in its graph
(weights and activations cast at export, see ``runtime.export.export.at_precision``), whatever the
engine passes at load. The device: OpenVINO may run a graph's float arithmetic at a lower precision
than the graph says (the CPU plugin defaults to bf16 on CPUs with AVX512_BF16 or AMX, and
ExecuTorch 1.5.1's backend imports a blob with no properties to stop it), or at a higher one where
the hardware lacks the type (bf16 weights on an AVX2 CPU are widened and multiplied in f32).

What the device ran is read from OpenVINO's execution graph: the ``runtimePrecision`` of the layers
that do the arithmetic (matrix products and convolutions). The precision the numbers carry, and the
one the parity gate holds them to, is the lower of the two.
"""

from __future__ import annotations

from typing import Any, Final

# from most to least exact; int8 programs are held to their accuracy gate's bound
_ORDER: Final = ("f32", "f16", "bf16", "int8")

# layers whose arithmetic sets the error of a policy's output; element-wise layers follow them
_COMPUTE_LAYERS: Final = frozenset(
    {"FullyConnected", "MatMul", "Convolution", "GroupConvolution", "Deconvolution", "ScaledDotProductAttention"}
)

# INFERENCE_PRECISION_HINT for a program lowered at each precision. An int8 program carries its
# quantisation in the graph; its float layers run at the device's fastest precision (no hint: the
# plugin's default, bf16 on CPUs with native bf16), as on the executorch engine, and are held to the
# INT8 accuracy gate, which measured them the same way. Holding them to f32 made an INT8 program
# slower than a bf16 one on such CPUs.
OV_HINT: Final[dict[str, str | None]] = {"f32": "f32", "f16": "f16", "bf16": "bf16", "int8": None}


def ov_precision_name(value: Any) -> str:
    """OpenVINO element type (``<Type: 'float32'>``, ``bf16``, ``FP32``...) -> f32 | f16 | bf16 | int8.

    Anything else is returned as its lower-case text.
    """
    text = str(getattr(value, "get_type_name", lambda: value)()).lower()
    for key, name in (
        ("bf16", "bf16"),
        ("bfloat16", "bf16"),  # before float16, which it contains
        ("f16", "f16"),
        ("float16", "f16"),
        ("fp16", "f16"),
        ("f32", "f32"),
        ("float32", "f32"),
        ("fp32", "f32"),
        ("i8", "int8"),
        ("u8", "int8"),
        ("int8", "int8"),  # <Type: 'int8_t'>, <Type: 'uint8_t'>
    ):
        if key in text:
            return name
    return text


def lower_of(*precisions: str) -> str:
    """The least exact of the given precisions (f32 > f16 > bf16 > int8); unknown names are ignored."""
    known = [p for p in precisions if p in _ORDER]
    return max(known, key=_ORDER.index) if known else "f32"


def executed_precision(compiled: Any) -> str:
    """The float precision OpenVINO runs ``compiled``'s arithmetic at, from its execution graph.

    The least exact float precision among the matrix-product and convolution layers (int8 layers of
    a quantised program are left out: the program's own precision says int8). Falls back to the
    compiled model's INFERENCE_PRECISION_HINT when no such layer exists or the device gives no graph.
    """
    seen: list[str] = []
    try:
        ops = compiled.get_runtime_model().get_ops()
    except RuntimeError:
        ops = []
    for op in ops:
        info = op.get_rt_info()
        if "layerType" not in info or "runtimePrecision" not in info:
            continue
        if info["layerType"].astype(str) not in _COMPUTE_LAYERS:
            continue
        name = ov_precision_name(info["runtimePrecision"].astype(str))
        if name in ("f32", "f16", "bf16"):
            seen.append(name)
    if seen:
        return lower_of(*seen)
    return ov_precision_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
