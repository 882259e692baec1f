"""Checks on a freshly lowered program for shapes OpenVINO is known to compute wrong without an error.

Run by ``export`` and ``lower`` on the lowered edge program, before anything is written:

- a delegate output that is one of the delegate's inputs passed through unchanged (the frontend turns
  ``clone``/``alias_copy`` of an input into a Result fed by a Parameter). The OpenVINO delegate does not
  write such an output when output tensors are bound after the inputs, and may overwrite the caller's
  input buffer. Read from the compiled blob itself (its runtime graph), so every way of producing that
  shape is caught. Refused.
- a tensor with a non-default dim order (channels-last...) at a partition edge: the delegate reads and
  writes its inputs and outputs as contiguous, so the values come out permuted. Refused.
- int64 ``cumsum``/``prod``/``sum`` inside a delegated partition: OpenVINO's CPU plugin computes them
  in 32 bits, so values past 2**31 wrap. Warned about (small values are exact).

Each finding names the tensor: the node name in the lowered graph and, where it is one, the program
input or output position.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runtime.bundle.pte import OPENVINO_BACKEND_ID
from runtime.errors import ExportError

log = logging.getLogger(__name__)

INT64_REDUCTIONS = ("aten::cumsum", "aten::prod", "aten::sum")


@dataclass(frozen=True)
class Finding:
    refuse: bool  # True: the program would compute wrong values; False: it may, for some inputs
    message: str


def check_lowered(
    edge: Any, device: str, input_names: Sequence[str] = (), output_names: Sequence[str] = ()
) -> list[Finding]:
    """Everything wrong with the OpenVINO delegates of ``edge`` (an ``EdgeProgramManager`` after lowering).

    ``input_names``/``output_names``: the program's inputs and outputs as the bundle names them.
    """
    program = edge.exported_program()
    gm = program.graph_module
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    program_outputs = list(output_node.args[0])
    findings: list[Finding] = []
    delegates = [n for n in gm.graph.nodes if n.op == "call_function" and "executorch_call_delegate" in str(n.target)]
    for index, node in enumerate(delegates):
        lowered = getattr(gm, node.args[0].target)
        if lowered.backend_id == OPENVINO_BACKEND_ID:
            names = _EdgeNames(
                list(node.args[1:]),
                _delegate_outputs(node),
                placeholders,
                program_outputs,
                list(input_names),
                list(output_names),
            )
            findings += _check_delegate(f"OpenVINO delegate {index}", lowered, names, device)
    return findings


@dataclass(frozen=True)
class _EdgeNames:
    """Names a delegate's inputs and outputs by graph node and, where they are one, program position."""

    inputs: list[Any]
    outputs: dict[int, Any]
    placeholders: list[Any]
    program_outputs: list[Any]
    input_names: list[str]
    output_names: list[str]

    def input(self, i: int) -> str:
        n = self.inputs[i]
        return f"input {i} ({n.name!r}{_position('input', n, self.placeholders, self.input_names)})"

    def output(self, j: int) -> str:
        n = self.outputs.get(j)
        if n is None:
            return f"output {j}"
        return f"output {j} ({n.name!r}{_position('output', n, self.program_outputs, self.output_names)})"


def _position(kind: str, node: Any, program_nodes: list[Any], names: list[str]) -> str:
    if node not in program_nodes:
        return ""  # an edge between two partitions, not a program input or output
    k = program_nodes.index(node)
    return f", program {kind} {k}" + (f" {names[k]!r}" if k < len(names) else "")


def _check_delegate(where: str, lowered: Any, names: _EdgeNames, device: str) -> list[Finding]:
    findings = [
        Finding(
            True,
            f"{where}: {names.output(j)} is its {names.input(i)} passed through unchanged (a clone or alias "
            "of an input); OpenVINO does not write such an output and may overwrite the caller's input "
            "buffer. Return that input from outside the policy (the caller has it already), or make the "
            "output a real computation",
        )
        for j, i in passthrough_outputs(bytes(lowered.processed_bytes), device)
    ]
    edges = [(names.input(i), n) for i, n in enumerate(names.inputs)]
    edges += [(names.output(j), n) for j, n in sorted(names.outputs.items())]
    for what, n in edges:
        order = _dim_order(n)
        if order is not None and order != tuple(range(len(order))):
            findings.append(
                Finding(
                    True,
                    f"{where}: {what} has dim order {list(order)} (not contiguous, e.g. channels-last) at the "
                    "partition edge; the delegate ignores the dim order there and the values come out "
                    "permuted. Export with contiguous example inputs and make tensors contiguous "
                    "(.contiguous()) before they enter or leave the policy",
                )
            )
    return findings + _int64_reductions(lowered, where)


def enforce(findings: list[Finding], what: str) -> None:
    """Log every finding; raise :class:`ExportError` listing the refusals, if any."""
    for f in findings:
        if not f.refuse:
            log.warning("%s: %s", what, f.message)
    refused = [f.message for f in findings if f.refuse]
    if refused:
        raise ExportError(
            f"{what}: refusing a program OpenVINO would run with wrong results and no error: " + "; ".join(refused)
        )


def passthrough_outputs(blob: bytes, device: str) -> list[tuple[int, int]]:
    """(output index, input index) pairs of a compiled OpenVINO blob whose Result is fed by a Parameter."""
    import openvino as ov

    runtime_model = ov.Core().import_model(blob, device).get_runtime_model()
    parameters = [p.get_friendly_name() for p in runtime_model.get_parameters()]
    pairs = []
    for j, result in enumerate(runtime_model.get_results()):
        source = result.input_value(0).get_node()
        if source.get_type_name() == "Parameter":
            pairs.append((j, parameters.index(source.get_friendly_name())))
    return pairs


def _delegate_outputs(node: Any) -> dict[int, Any]:
    """Output index -> the ``getitem`` node reading it (a single-tensor delegate is read directly)."""
    items = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    return items if items else {0: node}


def _dim_order(node: Any) -> tuple[int, ...] | None:
    val = getattr(node, "meta", {}).get("val")
    dim_order = getattr(val, "dim_order", None)
    if dim_order is None:
        return None
    try:
        return tuple(int(d) for d in dim_order())
    except Exception:  # symbolic or ambiguous strides: no fixed layout to get wrong
        return None


def _int64_reductions(lowered: Any, where: str) -> list[Finding]:
    import torch

    found = []
    for n in lowered.original_module.graph.nodes:
        if n.op != "call_function":
            continue
        schema = getattr(n.target, "_schema", None)
        name = getattr(schema, "name", "")
        if name not in INT64_REDUCTIONS:
            continue
        vals = [n.meta.get("val"), *(a.meta.get("val") for a in n.args if hasattr(a, "meta"))]
        if any(getattr(v, "dtype", None) == torch.int64 for v in vals):
            found.append(
                Finding(
                    False,
                    f"{where}: int64 {name} at {n.name!r} runs inside the delegate, and OpenVINO's CPU plugin "
                    "computes it in 32 bits: results past 2**31 wrap around with no error. Keep its values "
                    "small, or compute it in float",
                )
            )
    return found
