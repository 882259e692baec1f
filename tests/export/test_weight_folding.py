"""Folding each weight's quantize -> dequantize into an INT8 constant: what the layers compute is
unchanged bit for bit, each distinct weight is quantised once, the f32 weights leave the module, and
activations and asymmetric weights are left alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.ao.quantization.fx._decomposed")

Q = torch.ops.quantized_decomposed


def _weight() -> Any:
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0))


def _graph_module(scales: list[Any], zero_point: int | list[int] = 0, per_tensor_activation: bool = False) -> Any:
    """``x @ dq(q(w))^T`` once per scale in ``scales``, every pair reading the one stored ``w``, as
    NNCF writes weights (per channel, axis 0, -127..127) after ``unshare_weights`` gave each use a name."""
    root = torch.nn.Module()
    root.register_parameter("w", torch.nn.Parameter(_weight(), requires_grad=False))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    if per_tensor_activation:
        x = graph.call_function(
            Q.dequantize_per_tensor.default,
            (
                graph.call_function(Q.quantize_per_tensor.default, (x, 0.05, 0, -128, 127, torch.int8)),
                0.05,
                0,
                -128,
                127,
                torch.int8,
            ),
        )
    outputs = []
    for k, scale in enumerate(scales):
        name = "w" if k == 0 else f"w_use{k}"
        if k:
            root.register_parameter(name, torch.nn.Parameter(root.w.detach(), requires_grad=False))  # an alias
        root.register_buffer(f"s{k}", scale)
        zp = zero_point[k] if isinstance(zero_point, list) else zero_point
        root.register_buffer(f"z{k}", torch.full((4,), zp, dtype=torch.int64))
        w, s, z = graph.get_attr(name), graph.get_attr(f"s{k}"), graph.get_attr(f"z{k}")
        params = (s, z, 0, -127, 127, torch.int8)
        q = graph.call_function(Q.quantize_per_channel.default, (w, *params))
        dq = graph.call_function(Q.dequantize_per_channel.default, (q, *params))
        outputs.append(graph.call_function(torch.ops.aten.linear.default, (x, dq)))
    graph.output(tuple(outputs))
    return torch.fx.GraphModule(root, graph)


def _scale(value: float = 0.02) -> Any:
    return torch.full((4,), value)


def _targets(gm: Any) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_folded_layers_compute_the_same_bit_for_bit_and_read_int8() -> None:
    from runtime.export.weight_folding import fold_weight_quantization

    gm = _graph_module([_scale()])
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    before = gm(x)
    assert fold_weight_quantization(gm) == 1
    torch.testing.assert_close(gm(x), before, rtol=0, atol=0)
    assert Q.quantize_per_channel.default not in _targets(gm)
    assert Q.dequantize_per_channel.default not in _targets(gm)
    stored = dict(gm.named_buffers()) | dict(gm.named_parameters())
    assert "w" not in stored  # the f32 weight is gone from the module
    int8 = [v for v in stored.values() if v.dtype == torch.int8]
    assert len(int8) == 1 and tuple(int8[0].shape) == (4, 3)
    expected = torch.clamp(torch.round(_weight() / 0.02), -127, 127).to(torch.int8)
    torch.testing.assert_close(int8[0], expected, rtol=0, atol=0)


def test_aliases_with_equal_scales_are_quantised_once() -> None:
    from runtime.export.weight_folding import fold_weight_quantization

    gm = _graph_module([_scale(), _scale(), _scale()])
    x = torch.randn(2, 3)
    before = gm(x)
    assert fold_weight_quantization(gm) == 3
    torch.testing.assert_close(gm(x), before, rtol=0, atol=0)
    read = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    int8 = {t for t in read if getattr(gm, t).dtype == torch.int8}
    assert len(int8) == 1  # one INT8 constant read by the three layers
    assert not [t for t in read if getattr(gm, t).dtype == torch.float32 and tuple(getattr(gm, t).shape) == (4, 3)]


def test_one_storage_with_different_scales_gets_a_constant_per_scale() -> None:
    from runtime.export.weight_folding import fold_weight_quantization

    gm = _graph_module([_scale(0.02), _scale(0.03)])
    x = torch.randn(2, 3)
    before = gm(x)
    assert fold_weight_quantization(gm) == 2
    torch.testing.assert_close(gm(x), before, rtol=0, atol=0)
    int8 = {n.target for n in gm.graph.nodes if n.op == "get_attr" and getattr(gm, n.target).dtype == torch.int8}
    assert len(int8) == 2


def test_activations_and_asymmetric_weights_are_left_as_they_are() -> None:
    from runtime.export.weight_folding import fold_weight_quantization

    gm = _graph_module([_scale()], zero_point=3, per_tensor_activation=True)
    x = torch.randn(2, 3)
    before = gm(x)
    ops = _targets(gm)
    assert fold_weight_quantization(gm) == 0
    assert _targets(gm) == ops  # an activation's pair and a weight with a zero point: not folded
    torch.testing.assert_close(gm(x), before, rtol=0, atol=0)

    gm = _graph_module([_scale()], per_tensor_activation=True)
    assert fold_weight_quantization(gm) == 1  # the weight only
    assert _targets(gm).count(Q.dequantize_per_tensor.default) == 1


def _int8_names(gm: Any) -> list[str]:
    return [n.target for n in gm.graph.nodes if n.op == "get_attr" and getattr(gm, n.target).dtype == torch.int8]


def test_an_asymmetric_pair_does_not_stop_the_pairs_after_it() -> None:
    from runtime.export.weight_folding import fold_weight_quantization

    gm = _graph_module([_scale(0.02), _scale(0.03)], zero_point=[3, 0])
    x = torch.randn(2, 3)
    before = gm(x)
    assert fold_weight_quantization(gm) == 1
    torch.testing.assert_close(gm(x), before, rtol=0, atol=0)
    assert _targets(gm).count(Q.dequantize_per_channel.default) == 1  # the asymmetric one's


def test_a_weight_still_read_by_a_pair_left_alone_stays() -> None:
    """Two pairs read the one stored ``w`` (no alias): the symmetric one folds, the asymmetric one
    still reads ``w``, its scale and zero point."""
    from runtime.export.weight_folding import fold_weight_quantization

    gm = _graph_module([_scale(0.02), _scale(0.03)], zero_point=[0, 3])
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target == "w_use1":
            node.target = "w"
    gm.recompile()
    x = torch.randn(2, 3)
    before = gm(x)
    assert fold_weight_quantization(gm) == 1
    assert hasattr(gm, "w") and hasattr(gm, "s1") and hasattr(gm, "z1") and not hasattr(gm, "s0")
    torch.testing.assert_close(gm(x), before, rtol=0, atol=0)


def test_the_int8_constants_are_named_after_the_use_that_made_them_one_per_scale() -> None:
    from runtime.export.weight_folding import fold_weight_quantization

    gm = _graph_module([_scale(0.02), _scale(0.03), _scale(0.02)])
    gm.register_buffer("w_int8", torch.zeros(1))  # a name taken already: the next free one is used
    fold_weight_quantization(gm)
    assert _int8_names(gm) == ["w_int8_1", "w_use1_int8", "w_int8_1"]
    scales = [n.args[1].target for n in gm.graph.nodes if n.target == torch.ops.aten.mul.Tensor]
    assert scales == ["w_int8_1_scale", "w_use1_int8_scale", "w_int8_1_scale"]
    assert tuple(gm.w_int8_1_scale.shape) == (4, 1)  # per output channel, broadcast over the inputs
    assert not hasattr(gm, "w") and not hasattr(gm, "w_use1") and not hasattr(gm, "s0") and not hasattr(gm, "z1")

    for taken, free in ((("w_int8", "w_int8_2"), "w_int8_1"), (("w_int8", "w_int8_1"), "w_int8_2")):
        gm = _graph_module([_scale(0.02)])
        for name in taken:
            gm.register_buffer(name, torch.zeros(1))
        fold_weight_quantization(gm)
        assert _int8_names(gm) == [free]  # the first free one counting up from 1


def test_a_weight_of_a_submodule_and_a_per_tensor_pair() -> None:
    """``layer.w`` quantised per tensor (a literal scale): folded to ``layer_w_int8 * 0.02``."""
    from runtime.export.weight_folding import fold_weight_quantization

    root = torch.nn.Module()
    root.layer = torch.nn.Module()
    root.layer.register_parameter("w", torch.nn.Parameter(_weight(), requires_grad=False))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    params = (0.02, 0, -127, 127, torch.int8)
    q = graph.call_function(Q.quantize_per_tensor.default, (graph.get_attr("layer.w"), *params))
    dq = graph.call_function(Q.dequantize_per_tensor.default, (q, *params))
    graph.output(graph.call_function(torch.ops.aten.linear.default, (x, dq)))
    gm = torch.fx.GraphModule(root, graph)
    x_in = torch.randn(2, 3)
    before = gm(x_in)
    assert fold_weight_quantization(gm) == 1
    torch.testing.assert_close(gm(x_in), before, rtol=0, atol=0)
    assert _int8_names(gm) == ["layer_w_int8"]
    (mul,) = [n for n in gm.graph.nodes if n.target == torch.ops.aten.mul.Tensor]
    assert mul.args[1] == 0.02  # the literal scale, no constant made for it
    assert not hasattr(gm.layer, "w")


def _pair_graph(dq_scale: str = "s", scale_op: bool = False, dequantize: Any = None) -> Any:
    """One weight pair built to differ from NNCF's in one way."""
    root = torch.nn.Module()
    root.register_parameter("w", torch.nn.Parameter(_weight(), requires_grad=False))
    root.register_buffer("s", _scale())
    root.register_buffer("t", _scale(0.03))
    root.register_buffer("z", torch.zeros(4, dtype=torch.int64))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    s = graph.get_attr("s")
    if scale_op:
        s = graph.call_function(torch.ops.aten.abs.default, (s,))
    z = graph.get_attr("z")
    q = graph.call_function(Q.quantize_per_channel.default, (graph.get_attr("w"), s, z, 0, -127, 127, torch.int8))
    dq_s = s if dq_scale == "s" else graph.get_attr(dq_scale)
    dq = graph.call_function(dequantize or Q.dequantize_per_channel.default, (q, dq_s, z, 0, -127, 127, torch.int8))
    graph.output(graph.call_function(torch.ops.aten.linear.default, (x, dq)))
    return torch.fx.GraphModule(root, graph)


@pytest.mark.parametrize(
    "graph",
    [
        pytest.param(lambda: _pair_graph(dq_scale="t"), id="dequantize-with-another-scale"),
        pytest.param(lambda: _pair_graph(scale_op=True), id="scale-computed-in-the-graph"),
        pytest.param(
            lambda: _pair_graph(dequantize=Q.dequantize_per_tensor.default), id="per-tensor-after-per-channel"
        ),
    ],
)
def test_pairs_unlike_nncfs_weight_pairs_are_left_alone(graph: Any) -> None:
    from runtime.export.weight_folding import fold_weight_quantization

    gm = graph()
    ops = _targets(gm)
    assert fold_weight_quantization(gm) == 0
    assert _targets(gm) == ops and hasattr(gm, "w")


@pytest.mark.export
def test_a_quantised_model_folds_to_what_nncf_computed() -> None:
    """Through NNCF itself: the two-camera model's four convolutions over two shared weights."""
    pytest.importorskip("executorch")
    from executorch.backends.openvino.quantizer import QuantizationMode, quantize_model

    from runtime.export.shared_weights import attribute, unshare_weights
    from runtime.export.weight_folding import fold_weight_quantization
    from tests.export.test_shared_weights import TwoCameras, _example

    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    example = tuple(torch.from_numpy(v) for v in _example(rng).values())
    gm = torch.export.export(TwoCameras().eval(), example).module()
    assert unshare_weights(gm) == 2
    data = [tuple(torch.from_numpy(v) for v in _example(rng).values()) for _ in range(4)]
    q = quantize_model(
        gm, data, mode=QuantizationMode.INT8_TRANSFORMER, subset_size=4, fold_quantize=False, fast_bias_correction=None
    )
    before = q(*example)
    assert fold_weight_quantization(q) == 5  # four convolutions and the head
    torch.testing.assert_close(q(*example), before, rtol=0, atol=0)
    int8 = sorted(
        tuple(attribute(q, n.target).shape)
        for n in q.graph.nodes
        if n.op == "get_attr" and attribute(q, n.target).dtype == torch.int8
    )
    assert sorted(set(int8)) == [(12, 38), (16, 3, 3, 3), (16, 16, 3, 3)]
