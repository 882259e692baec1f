"""Giving each use of a shared weight a copy of its own, before INT8 quantisation.

A LeRobot policy with two cameras runs one image backbone on each: in the exported graph the same
convolution weights feed two calls. NNCF's post-training quantisation of such a graph (through
ExecuTorch's OpenVINO quantizer) quantises only one of the calls, and OpenVINO then runs the other
camera's backbone in float: measured on a LeRobot ACT with two 480x640 cameras, 21 of its 42
convolutions and 14 of its fully connected layers stayed bf16, and the INT8 program was slower than
OpenVINO + NNCF quantising the same model directly. With a copy of the weights per call every one
of them is quantised. The copies cost the weights' size once more in the portable program only; the
INT8 program holds each copy as INT8.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def _attr(module: Any, target: str) -> Any:
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def unshare_weights(gm: Any) -> int:
    """Give every use but the first of a constant read by several operations its own copy, in place.

    ``gm`` is a ``torch.fx.GraphModule`` (``ExportedProgram.module()``). Returns how many copies
    were made. The module computes exactly what it did: the copies hold the same values.
    """
    import torch

    made = 0
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        users = [u for u in node.users if u.op == "call_function"]
        if len(users) < 2:
            continue
        value = _attr(gm, node.target)
        if not isinstance(value, torch.Tensor) or value.dim() < 2:
            continue  # biases, scalars and norms: quantisation does not touch them
        for k, user in enumerate(users[1:], start=1):
            name = f"{node.target.replace('.', '_')}_use{k}"
            copy = value.detach().clone()
            if isinstance(value, torch.nn.Parameter):
                gm.register_parameter(name, torch.nn.Parameter(copy, requires_grad=False))
            else:
                gm.register_buffer(name, copy)
            with gm.graph.inserting_before(user):
                new = gm.graph.get_attr(name)
            new.meta = dict(node.meta)  # the quantizer reads shapes from the node's metadata
            user.replace_input_with(node, new)
            made += 1
    if made:
        gm.graph.lint()
        gm.recompile()
        log.info("gave %d uses of shared weights a copy of their own, so each is quantised", made)
    return made
