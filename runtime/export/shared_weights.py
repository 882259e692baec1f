"""Giving each use of a shared weight a name of its own before INT8 quantisation, and one constant
again after.

A LeRobot policy with two cameras runs one image backbone on each: in the exported graph the same
convolution weights feed two calls. NNCF's post-training quantisation of such a graph (through
ExecuTorch's OpenVINO quantizer) quantises only one of the calls, and OpenVINO then runs the other
camera's backbone in float: measured on a LeRobot ACT with two 480x640 cameras, 21 of its 42
convolutions and 14 of its fully connected layers stayed bf16, and the INT8 program was slower than
OpenVINO + NNCF quantising the same model directly. With a name per call every one of them is
quantised.

The names are aliases, not copies: each reads the weight's own storage. NNCF never writes a weight in
place (its bias correction replaces a constant with a new one), so an alias cannot change under
another use. Copies cost the weights' size once per use: SmolVLA's action expert runs once per flow
step, 1044 uses at LeRobot's default size (ten steps): with copies its calibration ended at 14 GB
resident, with aliases at 10.1 GB.

Once quantised (and folded, ``weight_folding.py``), constants of equal values are merged back
(:func:`reshare_weights`): a weight's INT8 values and scales come from the weight alone, so its uses
come out identical, and a policy that runs one network many times would otherwise carry one INT8
copy of it per run. Measured on the tiny SmolVLA (three flow steps): the quantised graph's constants
3.3 MB -> 0.54 MB, the lowering 151 s -> 124 s.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def attribute(module: Any, target: str) -> Any:
    """The module attribute a ``get_attr`` node's ``target`` names (dotted through submodules)."""
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def drop_attribute(module: Any, target: str) -> None:
    """Remove the attribute ``target`` names from its owner, so its tensor can be freed."""
    owner, _, name = target.rpartition(".")
    delattr(attribute(module, owner) if owner else module, name)


def _key(value: Any) -> tuple[str, tuple[int, ...], str]:
    import hashlib

    import torch

    raw = value.detach().contiguous().reshape(-1).view(torch.uint8)
    return str(value.dtype), tuple(value.shape), hashlib.blake2b(raw.numpy().tobytes(), digest_size=16).hexdigest()


def reshare_weights(gm: Any) -> int:
    """Make constants of equal dtype, shape and values one constant again, in place; returns how many
    were merged. ``gm`` is the quantised ``torch.fx.GraphModule``; it computes exactly what it did."""
    import torch

    first: dict[tuple[str, tuple[int, ...], str], Any] = {}
    merged = 0
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        value = attribute(gm, node.target)
        if not isinstance(value, torch.Tensor):
            continue
        key = _key(value)
        kept = first.get(key)
        if kept is None or not torch.equal(attribute(gm, kept.target), value):
            first.setdefault(key, node)
            continue
        node.replace_all_uses_with(kept)
        gm.graph.erase_node(node)
        if not any(n.op == "get_attr" and n.target == node.target for n in gm.graph.nodes):
            drop_attribute(gm, node.target)
        merged += 1
    if merged:
        gm.graph.lint()
        gm.recompile()
        log.info("merged %d quantised copies of shared constants back into one each", merged)
    return merged


def unshare_weights(gm: Any) -> int:
    """Give every use but the first of a constant read by several operations its own name, in place.

    ``gm`` is a ``torch.fx.GraphModule`` (``ExportedProgram.module()``). Returns how many names were
    added. Each new name aliases the weight's storage (no copy is made), so the module computes
    exactly what it did.
    """
    import torch

    made = 0
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        users = [u for u in node.users if u.op == "call_function"]
        if len(users) < 2:
            continue
        value = attribute(gm, node.target)
        if not isinstance(value, torch.Tensor) or value.dim() < 2:
            continue  # biases, scalars and norms: quantisation does not touch them
        for k, user in enumerate(users[1:], start=1):
            name = f"{node.target.replace('.', '_')}_use{k}"
            alias = value.detach()  # the same storage under another name
            if isinstance(value, torch.nn.Parameter):
                gm.register_parameter(name, torch.nn.Parameter(alias, requires_grad=False))
            else:
                gm.register_buffer(name, alias)
            with gm.graph.inserting_before(user):
                new = gm.graph.get_attr(name)
            new.meta = dict(node.meta)  # the quantizer reads shapes from the node's metadata
            user.replace_input_with(node, new)
            made += 1
    if made:
        gm.graph.lint()
        gm.recompile()
        log.info("gave %d uses of shared weights a name of their own, so each is quantised", made)
    return made
