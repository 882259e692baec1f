"""INT8 of attention whose query, key and value projections are chunks of one packed parameter
(``torch.nn.MultiheadAttention``, as LeRobot's ACT uses it): each chunk becomes a weight of its own,
so the quantizer quantises every projection."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.export
torch = pytest.importorskip("torch")


class Encoder(torch.nn.Module):
    """ACT's encoder layer in small: self-attention with query = key = x + pos, value = x."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(16, 2)
        self.out = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q = k = x + pos
        return self.out(self.attn(q, k, value=x)[0])


def _module() -> tuple[Any, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    example = (torch.randn(5, 1, 16), torch.randn(5, 1, 16))
    return torch.export.export(Encoder().eval(), example).module(), example


def _linear_weights(gm: Any) -> list[Any]:
    return [n.args[1] for n in gm.graph.nodes if n.op == "call_function" and n.target == torch.ops.aten.linear.default]


def test_each_chunk_of_a_packed_weight_becomes_a_weight_of_its_own_reading_its_storage() -> None:
    from runtime.export.shared_weights import attribute
    from runtime.export.weight_views import weights_of_their_own

    gm, example = _module()
    packed = attribute(gm, "attn.in_proj_weight")
    start, size = packed.untyped_storage().data_ptr(), packed.untyped_storage().nbytes()
    before = gm(*example)
    assert sum(w.op != "get_attr" for w in _linear_weights(gm)) == 3  # q, k, v: chunks of in_proj_weight

    assert weights_of_their_own(gm) == 3
    weights = _linear_weights(gm)
    assert all(w.op == "get_attr" for w in weights)
    assert len({w.target for w in weights}) == 5  # q, k, v, the output projection and the head
    views = [attribute(gm, w.target) for w in weights[:3]]
    assert all(start <= v.data_ptr() < start + size for v in views)  # aliases of the packed weight, not copies
    assert not hasattr(gm.attn, "in_proj_weight")  # nothing reads the packed parameter any more
    assert hasattr(gm.attn, "in_proj_bias")  # the bias is still chunked where it is used
    torch.testing.assert_close(gm(*example), before, rtol=0, atol=0)
    assert weights_of_their_own(gm) == 0


def test_a_weight_computed_from_a_parameter_is_left_alone() -> None:
    from runtime.export.weight_views import weights_of_their_own

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.linear(x, self.w * 2) + torch.nn.functional.linear(x, self.w.t().t())

    gm = torch.export.export(Scaled().eval(), (torch.randn(2, 8),)).module()
    assert weights_of_their_own(gm) == 1  # the transposed-back view, not the product


def test_through_the_quantizer_every_projection_reads_an_int8_weight() -> None:
    quantizer = pytest.importorskip("executorch.backends.openvino.quantizer")
    from runtime.export.weight_folding import fold_weight_quantization
    from runtime.export.weight_views import weights_of_their_own

    def int8_linears(with_views: bool) -> int:
        gm, example = _module()
        if with_views:
            weights_of_their_own(gm)
        data = [tuple(torch.randn_like(t) for t in example) for _ in range(4)]
        q = quantizer.quantize_model(
            gm, data, mode=quantizer.QuantizationMode.INT8_TRANSFORMER, subset_size=4, fold_quantize=False
        )
        fold_weight_quantization(q)
        reads_int8 = 0
        for w in _linear_weights(q):  # a folded weight is int8 * scale
            if w.op == "call_function" and w.target == torch.ops.aten.mul.Tensor:
                reads_int8 += getattr(w.args[0].meta.get("val"), "dtype", None) == torch.int8 or (
                    w.args[0].op == "get_attr" and getattr(q, w.args[0].target).dtype == torch.int8
                )
        return reads_int8

    assert int8_linears(with_views=False) == 2  # the chunked projections stay float
    assert int8_linears(with_views=True) == 5
