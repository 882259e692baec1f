"""What the lowering checks find and say, on a lowered program's graph made in the test.

The graphs here stand in for an ``EdgeProgramManager`` after lowering: nodes with the fields the
checks read (``op``, ``target``, ``args``, ``users``, ``meta``). The compiled blob the pass-through
check reads is a real OpenVINO blob, compiled from a model built in the test. That the shapes these
checks refuse really come out wrong, on programs ExecuTorch lowers, is shown in
``tests/engine/test_lowering_checks.py``.
"""

from __future__ import annotations

import io
import logging
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from runtime.errors import ExportError
from runtime.export.lowering_checks import (
    Finding,
    _delegate_outputs,
    _dim_order,
    _int64_reductions,
    check_lowered,
    enforce,
    passthrough_outputs,
)

PASSTHROUGH = (
    "passed through unchanged (a clone or alias of an input); OpenVINO does not write such an output and "
    "may overwrite the caller's input buffer. Return that input from outside the policy (the caller has it "
    "already), or make the output a real computation"
)
DIM_ORDER = (
    "(not contiguous, e.g. channels-last) at the partition edge; the delegate ignores the dim order there "
    "and the values come out permuted. Export with contiguous example inputs and make tensors contiguous "
    "(.contiguous()) before they enter or leave the policy"
)
INT64 = (
    "runs inside the delegate, and OpenVINO's CPU plugin computes it in 32 bits: results past 2**31 wrap "
    "around with no error. Keep its values small, or compute it in float"
)


@dataclass(eq=False)
class Node:
    name: str
    op: str = "call_function"
    target: Any = None
    args: tuple[Any, ...] = ()
    users: list[Any] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


class Order:
    """A tensor's ``meta['val']`` as the checks read it: only its dim order."""

    def __init__(self, *order: int) -> None:
        self.order = order

    def dim_order(self) -> tuple[int, ...]:
        return self.order


class Graph:
    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes


class Lowered:
    def __init__(self, blob: bytes, backend_id: str = "OpenvinoBackend", nodes: list[Node] | None = None) -> None:
        self.backend_id = backend_id
        self.processed_bytes = blob
        self.original_module = type("Module", (), {"graph": Graph(nodes or [])})()


class Edge:
    """``edge.exported_program().graph_module``: the graph, and each lowered module as an attribute."""

    def __init__(self, nodes: list[Node], lowered: dict[str, Lowered]) -> None:
        gm = type("GraphModule", (), {})()
        gm.graph = Graph(nodes)
        for name, module in lowered.items():
            setattr(gm, name, module)
        self._program = type("Program", (), {"graph_module": gm})()

    def exported_program(self) -> Any:
        return self._program


def _blob(passthrough: bool) -> bytes:
    """A compiled OpenVINO blob of two inputs: output 0 = relu(a), output 1 = b itself or b + 1."""
    import openvino as ov
    import openvino.opset13 as ops

    a = ops.parameter([6], ov.Type.f32, name="a")
    b = ops.parameter([3], ov.Type.f32, name="b")
    second = b if passthrough else ops.add(b, ops.constant(np.ones(3, np.float32)))
    model = ov.Model([ops.relu(a), second], [a, b])
    blob = io.BytesIO()
    ov.Core().compile_model(model, "CPU").export_model(blob)
    return blob.getvalue()


@pytest.fixture(scope="module")
def blobs() -> dict[str, bytes]:
    return {"passthrough": _blob(True), "clean": _blob(False)}


def _delegate(index: int, inputs: list[Node], outputs: int) -> tuple[Node, list[Node]]:
    """A delegate call reading ``inputs``, and a ``getitem`` node per output it has."""
    call = Node(f"executorch_call_delegate_{index}", target="executorch_call_delegate")
    call.args = (Node(f"lowered_module_{index}", op="get_attr", target=f"lowered_module_{index}"), *inputs)
    items = [Node(f"getitem_{index}_{j}", target=operator.getitem, args=(call, j)) for j in range(outputs)]
    call.users = list(items)
    return call, items


def test_a_passed_through_output_is_refused_naming_both_program_positions(blobs: dict[str, bytes]) -> None:
    image, state = Node("image", op="placeholder"), Node("state", op="placeholder")
    call, (action, echo) = _delegate(0, [image, state], 2)
    out = Node("output", op="output", args=([action, echo],))
    edge = Edge([image, state, call, action, echo, out], {"lowered_module_0": Lowered(blobs["passthrough"])})

    findings = check_lowered(edge, "CPU", ["observation.image", "observation.state"], ["action", "state_out"])

    assert findings == [
        Finding(
            True,
            "OpenVINO delegate 0: output 1 ('getitem_0_1', program output 1 'state_out') is its input 1 "
            f"('state', program input 1 'observation.state') {PASSTHROUGH}",
        )
    ]


def test_every_openvino_delegate_is_checked_and_named_by_its_index(blobs: dict[str, bytes]) -> None:
    a, b = Node("a", op="placeholder"), Node("b", op="placeholder")
    first, (f0, f1) = _delegate(0, [a, b], 2)
    other, (o0,) = _delegate(1, [f0], 1)  # another backend: not read, not checked
    second, (s0, s1) = _delegate(2, [o0, f1], 2)
    out = Node("output", op="output", args=([s0, s1],))
    lowered = {
        "lowered_module_0": Lowered(blobs["passthrough"]),
        "lowered_module_1": Lowered(b"not a blob", backend_id="XnnpackBackend"),
        "lowered_module_2": Lowered(blobs["passthrough"]),
    }
    edge = Edge([a, b, first, f0, f1, other, o0, second, s0, s1, out], lowered)

    messages = [f.message for f in check_lowered(edge, "CPU", ["x"], [])]

    assert messages == [
        f"OpenVINO delegate 0: output 1 ('getitem_0_1') is its input 1 ('b', program input 1) {PASSTHROUGH}",
        # an edge between two partitions is named by its node only; a program position past the names
        # given is named by number only
        f"OpenVINO delegate 2: output 1 ('getitem_2_1', program output 1) is its input 1 ('getitem_0_1') {PASSTHROUGH}",
    ]


def test_a_program_with_nothing_wrong_has_no_findings(blobs: dict[str, bytes]) -> None:
    a, b = Node("a", op="placeholder", meta={"val": Order(0)}), Node("b", op="placeholder", meta={"val": Order(0)})
    call, items = _delegate(0, [a, b], 2)
    for item in items:
        item.meta["val"] = Order(0, 1)
    out = Node("output", op="output", args=(items,))
    assert check_lowered(Edge([a, b, call, *items, out], {"lowered_module_0": Lowered(blobs["clean"])}), "CPU") == []


def test_a_non_contiguous_edge_is_refused_inputs_first_then_outputs_in_order(blobs: dict[str, bytes]) -> None:
    img = Node("img", op="placeholder", meta={"val": Order(0, 2, 3, 1)})
    state = Node("state", op="placeholder", meta={"val": Order(0, 1)})
    call, (y0, y1) = _delegate(0, [img, state], 2)
    y0.meta["val"], y1.meta["val"] = Order(1, 0), Order(0, 1, 2)
    call.users = [y1, y0]  # outputs are reported by index, not in the order the graph reads them
    out = Node("output", op="output", args=([y0, y1],))
    edge = Edge([img, state, call, y0, y1, out], {"lowered_module_0": Lowered(blobs["clean"])})

    assert [f.message for f in check_lowered(edge, "CPU", ["observation.image"], ["action"])] == [
        f"OpenVINO delegate 0: input 0 ('img', program input 0 'observation.image') has dim order [0, 2, 3, 1] "
        f"{DIM_ORDER}",
        f"OpenVINO delegate 0: output 0 ('getitem_0_0', program output 0 'action') has dim order [1, 0] {DIM_ORDER}",
    ]
    assert all(f.refuse for f in check_lowered(edge, "CPU"))


def test_a_single_tensor_delegate_is_its_own_output_0() -> None:
    call = Node("executorch_call_delegate")
    assert _delegate_outputs(call) == {0: call}
    other_user = Node("relu", target="aten.relu", args=(call,))
    call.users = [other_user]
    assert _delegate_outputs(call) == {0: call}
    _, items = _delegate(0, [], 3)
    assert _delegate_outputs(items[0].args[0]) == {0: items[0], 1: items[1], 2: items[2]}


def test_a_tensor_without_a_fixed_layout_has_no_dim_order() -> None:
    class Symbolic:
        def dim_order(self) -> tuple[int, ...]:
            raise RuntimeError("ambiguous strides")

    assert _dim_order(object()) is None  # no meta at all
    assert _dim_order(Node("n")) is None  # no value recorded
    assert _dim_order(Node("n", meta={"val": 3})) is None  # a value without a dim order (a SymInt...)
    assert _dim_order(Node("n", meta={"val": Symbolic()})) is None
    assert _dim_order(Node("n", meta={"val": Order(0, 2, 1)})) == (0, 2, 1)


def _reduction(name: str, out: Any, *args: Any, node_name: str = "aten_cumsum_default") -> Node:
    target = type("Op", (), {"_schema": type("Schema", (), {"name": name})()})()
    return Node(node_name, target=target, args=args, meta={"val": out})


def test_an_int64_reduction_is_warned_about_from_its_output_or_its_input() -> None:
    import torch

    i64, f32 = torch.empty(3, dtype=torch.int64), torch.empty(3)
    nodes = [
        Node("x", op="placeholder", meta={"val": f32}),
        # what is not an int64 reduction comes first: the check goes on past each
        _reduction("aten::mean", i64, Node("steps", meta={"val": i64})),  # not a reduction OpenVINO narrows
        Node("getitem", target=operator.getitem, args=(Node("d"), 0)),  # a target without a schema
        Node("noschema", target=type("Op", (), {"_schema": None})()),  # a schema without a name
        _reduction("aten::prod", f32, Node("x", meta={"val": f32})),  # float in, float out: fine
        _reduction("aten::cumsum", None, Node("n"), Node("m", meta={}), node_name="unknown_types"),
        # an int64 output of a float input (cumsum(x, dtype=int64))
        _reduction("aten::cumsum", i64, Node("x", meta={"val": f32}), 0),
        Node("lowered", op="get_attr", target="aten::cumsum"),
        # a float output of an int64 input (sum(x, dtype=float))
        _reduction("aten::sum", f32, Node("steps", meta={"val": i64}), node_name="aten_sum_dim_IntList"),
    ]

    findings = _int64_reductions(Lowered(b"", nodes=nodes), "OpenVINO delegate 3")

    assert findings == [
        Finding(False, f"OpenVINO delegate 3: int64 aten::cumsum at 'aten_cumsum_default' {INT64}"),
        Finding(False, f"OpenVINO delegate 3: int64 aten::sum at 'aten_sum_dim_IntList' {INT64}"),
    ]


def test_enforce_warns_about_what_may_go_wrong_and_refuses_what_will(caplog: pytest.LogCaptureFixture) -> None:
    findings = [Finding(False, "maybe"), Finding(True, "first"), Finding(False, "perhaps"), Finding(True, "second")]
    with (
        caplog.at_level(logging.WARNING, logger="runtime.export.lowering_checks"),
        pytest.raises(ExportError) as err,
    ):
        enforce(findings, "the CPU program")
    assert str(err.value) == (
        "the CPU program: refusing a program OpenVINO would run with wrong results and no error: first; second"
    )
    assert [r.getMessage() for r in caplog.records] == ["the CPU program: maybe", "the CPU program: perhaps"]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="runtime.export.lowering_checks"):
        enforce([Finding(False, "maybe")], "the CPU program")  # warnings alone: no refusal
        enforce([], "the CPU program")
    assert [r.getMessage() for r in caplog.records] == ["the CPU program: maybe"]


def test_passthrough_outputs_reads_the_compiled_blob(blobs: dict[str, bytes]) -> None:
    assert passthrough_outputs(blobs["passthrough"], "CPU") == [(1, 1)]
    assert passthrough_outputs(blobs["clean"], "CPU") == []


def test_an_int64_reduction_inside_a_delegate_is_named_by_the_delegate(blobs: dict[str, bytes]) -> None:
    import torch

    x = Node("x", op="placeholder")
    call, (y,) = _delegate(0, [x], 1)
    out = Node("output", op="output", args=([y],))
    cumsum = _reduction("aten::cumsum", torch.empty(3, dtype=torch.int64), Node("x", meta={}))
    edge = Edge([x, call, y, out], {"lowered_module_0": Lowered(blobs["clean"], nodes=[cumsum])})
    assert check_lowered(edge, "CPU") == [
        Finding(False, f"OpenVINO delegate 0: int64 aten::cumsum at 'aten_cumsum_default' {INT64}")
    ]
