"""Lowering a bf16 program whose graph holds a 0-d bf16 constant (SmolVLA's, under autocast).

OpenVINO 2025.4's PyTorch frontend makes every bf16 constant through
``Tensor(array viewed as float16, shape, bf16)``, which raises ``IndexError: too many indices for an
array`` for a 0-d tensor: ``export --precision bf16`` of a SmolVLA checkpoint failed in the
delegate's conversion ("Conversion is failed for: get_attr"), at any size. While lowering, such a
constant is made from its value instead (exact: a bf16 value is an f32 one); every other tensor goes
through OpenVINO's own code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def scalar_bf16_constant(tensor: Any) -> Any:
    """OpenVINO's constant of ``tensor`` made from its value when it is a 0-d bf16 torch tensor, else None."""
    import torch
    from openvino import Shape, Type, op

    if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.bfloat16 and tensor.dim() == 0:
        return op.Constant(Type.bf16, Shape([]), [float(tensor)])
    return None


@contextlib.contextmanager
def scalar_bf16_constants() -> Iterator[None]:
    """While the block runs, the frontend's constants of 0-d bf16 tensors are made from their value."""
    try:
        from openvino.frontend.pytorch import fx_decoder
    except ImportError:  # no OpenVINO frontend: nothing to mend
        yield
        return
    original = fx_decoder.torch_tensor_to_ov_const

    def convert(tensor: Any, shared_memory: bool = True) -> Any:
        made = scalar_bf16_constant(tensor)
        return made if made is not None else original(tensor, shared_memory=shared_memory)

    fx_decoder.torch_tensor_to_ov_const = convert
    try:
        yield
    finally:
        fx_decoder.torch_tensor_to_ov_const = original
