"""Folding NNCF's quantize -> dequantize of each weight into one INT8 constant per distinct weight.

After post-training quantisation every weight reaches its layer as ``dequantize(quantize(w))``, with
``w`` still f32. Folded, the layer reads ``int8 * scale``: the weight is stored as INT8 (a quarter of
the size in the portable program and in what OpenVINO compiles), and OpenVINO sees its usual
compressed-weight pattern (an INT8 constant, converted, times a per-channel scale).

NNCF can fold itself (``fold_quantize=True``), but not at a large policy's scale: it updates each
constant with a dead-code pass over the whole graph, and keeps on each new node a real f32 tensor the
size of its weight as metadata. On a default-size SmolVLA (a graph of about 20k nodes, 1044 weight
uses) that ran for more than 12 minutes and past 23 GB. Here the graph is walked once, each distinct
weight (aliases of one storage with equal scales, ``shared_weights.py``) is quantised once, and the
new nodes carry the metadata of the node they replace.

The folded module computes exactly what it did: ``dequantize_per_channel`` is ``(q - zero_point) *
scale`` in f32, and the zero point of a symmetric weight is 0. A weight with a non-zero zero point is
left as NNCF gave it.
"""

from __future__ import annotations

import logging
from typing import Any

from runtime.export.shared_weights import attribute, drop_attribute

log = logging.getLogger(__name__)


def _ops() -> dict[Any, tuple[Any, bool]]:
    """Each dequantize op -> (the quantize op it must be fed by, whether it is per channel)."""
    import torch
    import torch.ao.quantization.fx._decomposed  # registers the quantized_decomposed ops

    q = torch.ops.quantized_decomposed
    return {
        q.dequantize_per_channel.default: (q.quantize_per_channel.default, True),
        q.dequantize_per_tensor.default: (q.quantize_per_tensor.default, False),
    }


def _value(gm: Any, arg: Any) -> Any:
    return attribute(gm, arg.target) if hasattr(arg, "op") and arg.op == "get_attr" else arg


def _weight_pair(dq: Any, ops: dict[Any, tuple[Any, bool]]) -> tuple[Any, bool] | None:
    """The quantize node feeding ``dq`` and whether it is per channel, when the pair quantises a
    stored weight (a ``get_attr``) with constant parameters; None for activations and anything else."""
    if dq.op != "call_function" or dq.target not in ops:
        return None
    quantize, per_channel = ops[dq.target]
    q = dq.args[0]
    if not hasattr(q, "op") or q.op != "call_function" or q.target != quantize:
        return None
    weight, *params = q.args
    if not hasattr(weight, "op") or weight.op != "get_attr":
        return None
    if list(dq.args[1:]) != params or any(hasattr(p, "op") and p.op != "get_attr" for p in params):
        return None  # not the pair NNCF writes for a weight: same constant parameters on both sides
    return q, per_channel


def _storage(value: Any) -> tuple[Any, ...]:
    """What identifies a weight's values without reading them: aliases of one storage compare equal."""
    return (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), tuple(value.stride()))


def _param_key(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return (str(value.dtype), tuple(value.shape), value.detach().contiguous().numpy().tobytes())
    return value if not isinstance(value, torch.dtype) else str(value)


def fold_weight_quantization(gm: Any) -> int:
    """Replace every weight's quantize -> dequantize pair in ``gm`` (a quantised ``torch.fx.GraphModule``)
    by its INT8 constant times its scale, in place; returns how many pairs were folded. The f32
    weights no node reads any more are dropped from the module."""
    import torch

    ops = _ops()
    made: dict[tuple[Any, ...], tuple[str, str]] = {}  # weight and parameters -> (INT8 name, scale name)
    read: set[str] = set()
    folded = 0
    for dq in list(gm.graph.nodes):
        pair = _weight_pair(dq, ops)
        if pair is None:
            continue
        q, per_channel = pair
        weight, scale, zero_point, *rest = (_value(gm, a) for a in q.args)
        if torch.as_tensor(zero_point).ne(0).any():
            continue  # an asymmetric weight: dequantize is not int8 * scale
        key = (_storage(weight), _param_key(scale), *map(_param_key, rest))  # the zero point is 0 here
        names = made.get(key)
        if names is None:
            int8 = q.target(weight.detach(), scale, zero_point, *rest)
            if per_channel:
                shape = [1] * weight.dim()
                shape[rest[0]] = scale.shape[0]  # rest = (axis, quant_min, quant_max, dtype)
                scale = scale.detach().reshape(shape).clone()
            names = (_register(gm, f"{q.args[0].target.replace('.', '_')}_int8", int8), "")
            if isinstance(scale, torch.Tensor):
                names = (names[0], _register(gm, f"{names[0]}_scale", scale))
            made[key] = names
        with gm.graph.inserting_before(dq):
            int8_node = gm.graph.get_attr(names[0])
            scale_arg = gm.graph.get_attr(names[1]) if names[1] else scale
            product = gm.graph.call_function(torch.ops.aten.mul.Tensor, (int8_node, scale_arg))
        product.meta = dict(dq.meta)
        dq.replace_all_uses_with(product)
        read.update(a.target for a in q.args if hasattr(a, "op") and a.op == "get_attr")
        folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        still = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
        for target in read - still:
            drop_attribute(gm, target)
        gm.graph.lint()
        gm.recompile()
        log.info("folded %d quantised weights into %d INT8 constants", folded, len(made))
    return folded


def _register(gm: Any, prefix: str, value: Any) -> str:
    name, k = prefix, 0
    while hasattr(gm, name):
        k += 1
        name = f"{prefix}_{k}"
    gm.register_buffer(name, value)
    return name
