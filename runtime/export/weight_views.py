"""Giving a layer whose weight is a slice of a stored parameter that slice as a weight of its own,
before INT8 quantisation.

``torch.nn.MultiheadAttention`` keeps the query, key and value projections in one packed parameter
(``in_proj_weight``, three times the width by the width) and chunks it at every call, so in the
exported graph those linear layers read ``getitem(chunk(in_proj_weight), i)`` rather than a stored
weight. The quantizer (NNCF, through ExecuTorch's OpenVINO quantizer) quantises only weights it finds
stored, and leaves these layers' weights float: OpenVINO then runs them in float. Measured on a
LeRobot ACT with two 480x640 cameras: 18 of its 37 linear layers (every attention's projections)
read a chunk; 14 of them ran as bf16 fully connected layers (4.0 ms of an 86 ms INT8 inference on one
thread of a Xeon with AMX), where OpenVINO + NNCF straight from PyTorch, whose converter folds the
chunk into constants, runs all of them INT8.

Each such slice becomes a buffer of its own. A chunk, slice or view of a parameter is an alias of its
storage, not a copy, so no memory is added; the packed parameter is dropped once nothing reads it.
The module computes exactly what it did.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

from runtime.export.shared_weights import attribute, drop_attribute

log = logging.getLogger(__name__)


def _view_ops() -> frozenset[Any]:
    """Ops that take part of a tensor, or look at it in another shape, without computing on it."""
    import torch

    aten = torch.ops.aten
    return frozenset(
        {
            operator.getitem,
            aten.chunk.default,
            aten.split.Tensor,
            aten.split_with_sizes.default,
            aten.unbind.int,
            aten.slice.Tensor,
            aten.select.int,
            aten.t.default,
            aten.transpose.int,
            aten.permute.default,
            aten.view.default,
            aten.reshape.default,
            aten.unsqueeze.default,
            aten.squeeze.dim,
        }
    )


def _layers() -> frozenset[Any]:
    """The layers whose second argument is the weight the quantizer looks for."""
    import torch

    aten = torch.ops.aten
    return frozenset({aten.linear.default, aten.conv1d.default, aten.conv2d.default, aten.conv3d.default})


def weights_of_their_own(gm: Any) -> int:
    """Make every layer weight of ``gm`` (a ``torch.fx.GraphModule``) that is a view of stored tensors a
    stored buffer of its own, in place; returns how many were made."""
    import torch

    views, layers = _view_ops(), _layers()
    value: dict[Any, Any] = {}  # node -> the tensor (or tuple of tensors) it stands for, for constant nodes
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value[node] = attribute(gm, node.target)
        elif (
            node.op == "call_function"
            and node.target in views
            and node.all_input_nodes
            and all(a in value for a in node.all_input_nodes)
        ):
            args = torch.fx.node.map_arg(node.args, lambda a: value[a])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: value[a])
            value[node] = node.target(*args, **kwargs)
    made = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in layers or len(node.args) < 2:
            continue
        weight = node.args[1]
        if not isinstance(weight, torch.fx.Node) or weight.op == "get_attr" or weight not in value:
            continue
        tensor = value[weight]
        if not isinstance(tensor, torch.Tensor):
            continue
        name, k = f"{weight.name}_weight", 0
        while hasattr(gm, name):
            k += 1
            name = f"{weight.name}_weight_{k}"
        gm.register_buffer(name, tensor.detach())  # a view: the parameter's own storage
        with gm.graph.inserting_before(node):
            stored = gm.graph.get_attr(name)
        stored.meta = dict(weight.meta)  # the quantizer reads shapes from the node's metadata
        node.replace_input_with(weight, stored)
        made += 1
    if made:
        _drop_unread(gm, set(value))
        gm.graph.lint()
        gm.recompile()
        log.info("gave %d layer weights that are slices of a stored parameter a name of their own", made)
    return made


def _drop_unread(gm: Any, constant: set[Any]) -> None:
    """Erase the constant view nodes nothing reads any more, then the attributes no node reads."""
    for node in reversed(list(gm.graph.nodes)):
        if node in constant and node.op == "call_function" and not node.users:
            gm.graph.erase_node(node)
    read = {n.target for n in gm.graph.nodes if n.op == "get_attr" and n.users}
    for node in list(gm.graph.nodes):
        if node in constant and node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
            if node.target not in read:
                drop_attribute(gm, node.target)
