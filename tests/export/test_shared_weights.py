"""INT8 of a policy whose cameras share one backbone: every use of the shared weights is quantised,
and the uses are one INT8 weight again in the program.

Checked where it matters, in what OpenVINO runs: the runtime precision of each convolution in the
INT8 program's execution graph."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.export
torch = pytest.importorskip("torch")
pytest.importorskip("executorch")


class TwoCameras(torch.nn.Module):
    """One backbone run on each of two cameras, as LeRobot's ACT does."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3), torch.nn.ReLU()
        )
        self.head = torch.nn.Linear(32 + 6, 12)

    def forward(self, front: torch.Tensor, wrist: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        a = self.backbone(front.permute(2, 0, 1)[None].float() / 255).mean((2, 3))[0]
        b = self.backbone(wrist.permute(2, 0, 1)[None].float() / 255).mean((2, 3))[0]
        return self.head(torch.cat([a, b, state])).reshape(2, 6)


NAMES = ("observation.images.front", "observation.images.wrist", "observation.state")


def _example(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        NAMES[0]: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
        NAMES[1]: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
        NAMES[2]: rng.normal(size=6).astype(np.float32),
    }


def test_each_use_gets_a_name_of_its_own_reading_the_same_storage() -> None:
    from runtime.export.shared_weights import attribute, unshare_weights

    model = TwoCameras().eval()
    example = tuple(torch.from_numpy(v) for v in _example(np.random.default_rng(0)).values())
    gm = torch.export.export(model, example).module()
    before = gm(*example)
    convs = [n for n in gm.graph.nodes if n.op == "call_function" and "conv" in str(n.target)]
    assert len({c.args[1] for c in convs}) == 2  # four convolutions, two weights
    assert unshare_weights(gm) == 2
    convs = [n for n in gm.graph.nodes if n.op == "call_function" and "conv" in str(n.target)]
    assert len({c.args[1] for c in convs}) == 4  # a weight each
    storages = {attribute(gm, c.args[1].target).untyped_storage().data_ptr() for c in convs}
    assert len(storages) == 2  # aliases: no weight was copied
    torch.testing.assert_close(gm(*example), before, rtol=0, atol=0)
    assert unshare_weights(gm) == 0  # nothing shared any more


def _conv_precisions(bundle: Path) -> Counter[str]:
    import openvino as ov

    from runtime.bundle.bundle import Bundle
    from runtime.bundle.pte import parse_program
    from runtime.engine.openvino_engine import import_blob
    from runtime.engine.precision import ov_precision_name

    method = parse_program(Bundle.open(bundle).read_program("CPU"), str(bundle))["forward"]
    compiled, _ = import_blob(ov.Core(), bytes(method.delegates[0].payload), "CPU", {})
    seen: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) == "Convolution":
            seen[ov_precision_name(info["runtimePrecision"].astype(str))] += 1
    return seen


def test_int8_quantises_both_cameras_backbone(tmp_path: Path) -> None:
    from runtime.export.export import export_bundle
    from runtime.export.quantize import quantize_bundle

    rng = np.random.default_rng(1)
    example = {k: torch.from_numpy(v) for k, v in _example(rng).items()}
    f32 = tmp_path / "f32"
    torch.manual_seed(0)
    export_bundle(lambda: (TwoCameras().eval(), example), f32, action_names=tuple("abcdef"))
    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(12):
        np.savez(calib / f"obs_{i:02d}.npz", **_example(rng))  # type: ignore[arg-type]

    quantize_bundle(f32, calib, tmp_path / "int8", max_error=5.0)
    assert _conv_precisions(tmp_path / "int8") == Counter({"int8": 4})  # both cameras, both layers
    # and the portable program holds each weight once, as INT8: the copies came back together
    from runtime.bundle.bundle import Bundle

    m = Bundle.open(tmp_path / "int8").manifest
    assert m.portable_program is not None
    ep = torch.export.load(str(tmp_path / "int8" / m.portable_program.file))
    tensors = [t for t in [*ep.state_dict.values(), *ep.constants.values()] if isinstance(t, torch.Tensor)]
    weights = sorted(tuple(t.shape) for t in tensors if t.dtype == torch.int8 and t[0].numel() > 1)  # not zero points
    assert weights == [(12, 38), (16, 3, 3, 3), (16, 16, 3, 3)]
    assert not [t for t in tensors if t.dtype == torch.float32 and t[0].numel() > 1]  # only scales stay float


def test_copies_that_stayed_equal_are_merged_back_and_the_module_computes_the_same() -> None:
    from runtime.export.shared_weights import reshare_weights, unshare_weights

    model = TwoCameras().eval()
    example = tuple(torch.from_numpy(v) for v in _example(np.random.default_rng(0)).values())
    gm = torch.export.export(model, example).module()
    before = gm(*example)
    assert unshare_weights(gm) == 2
    convs = [n for n in gm.graph.nodes if n.op == "call_function" and "conv" in str(n.target)]
    changed = convs[3].args[1]  # one use given a different constant, as NNCF's corrections do
    kept = getattr(gm, changed.target)
    setattr(gm, changed.target, torch.nn.Parameter(kept.detach() + 1e-3, requires_grad=False))
    assert reshare_weights(gm) == 1  # the other copy is one weight again, the changed one stays
    convs = [n for n in gm.graph.nodes if n.op == "call_function" and "conv" in str(n.target)]
    assert len({c.args[1] for c in convs}) == 3 and convs[3].args[1] is changed
    assert (gm(*example) - before).abs().max() > 0  # the changed copy is what its call reads
    setattr(gm, changed.target, torch.nn.Parameter(kept.detach().clone(), requires_grad=False))
    assert reshare_weights(gm) == 1  # equal again: merged
    assert len({n.args[1] for n in gm.graph.nodes if n.op == "call_function" and "conv" in str(n.target)}) == 2
    torch.testing.assert_close(gm(*example), before, rtol=0, atol=0)


def _linear_uses(uses: int, *, buffer: bool = False, dotted: bool = False) -> Any:
    """A lone weight ``v`` read once, then a shared bias ``b`` and a shared 2-D weight (``w``, or
    ``layer.w`` of a submodule; a parameter or a buffer), each read by ``uses`` linear layers."""
    root = torch.nn.Module()
    owner, target = root, "w"
    if dotted:
        root.layer = torch.nn.Module()
        owner, target = root.layer, "layer.w"
    weight = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    if buffer:
        owner.register_buffer("w", weight)
    else:
        owner.register_parameter("w", torch.nn.Parameter(weight, requires_grad=False))
    root.register_buffer("v", torch.ones(4, 3))
    root.register_buffer("b", torch.arange(4, dtype=torch.float32))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    outputs = [graph.call_function(torch.ops.aten.linear.default, (x, graph.get_attr("v")))]
    b, w = graph.get_attr("b"), graph.get_attr(target)
    outputs += [graph.call_function(torch.ops.aten.linear.default, (x, w, b)) for _ in range(uses)]
    graph.output(tuple(outputs))
    return torch.fx.GraphModule(root, graph)


@pytest.mark.parametrize(("buffer", "dotted"), [(False, False), (True, False), (False, True)])
def test_each_further_use_is_named_after_the_weight_and_registered_as_the_weight_was(
    buffer: bool, dotted: bool
) -> None:
    from runtime.export.shared_weights import attribute, unshare_weights

    gm = _linear_uses(3, buffer=buffer, dotted=dotted)
    x = torch.randn(2, 3)
    before = gm(x)
    assert unshare_weights(gm) == 2
    prefix = "layer_w" if dotted else "w"
    weight = attribute(gm, "layer.w" if dotted else "w")
    reads = [n.args[1].target for n in gm.graph.nodes if n.op == "call_function"]
    assert reads == ["v", "layer.w" if dotted else "w", f"{prefix}_use1", f"{prefix}_use2"]
    for k in (1, 2):
        alias = getattr(gm, f"{prefix}_use{k}")
        assert alias.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()
        assert not alias.requires_grad
        assert (f"{prefix}_use{k}" in dict(gm.named_buffers())) is buffer
    biases = [n.args[2].target for n in gm.graph.nodes if n.op == "call_function" and len(n.args) == 3]
    assert biases == ["b", "b", "b"]  # 1-D: quantisation does not touch it, it stays one constant
    torch.testing.assert_close(gm(x), before, rtol=0, atol=0)


def test_equal_constants_are_merged_and_the_merged_ones_leave_the_module() -> None:
    """a, b, b again (read twice), a again, and c: two kinds of equal, one of them read by two nodes;
    a submodule read first is not a constant and is passed over."""
    from runtime.export.shared_weights import reshare_weights

    root = torch.nn.Module()
    root.sub = torch.nn.Module()
    a, b, c = torch.ones(4, 3), torch.full((4, 3), 2.0), torch.full((4, 3), 3.0)
    for name, value in (("a", a), ("b", b), ("b2", b.clone()), ("a2", a.clone()), ("c", c)):
        root.register_buffer(name, value)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.get_attr("sub")
    reads = ["a", "b", "b2", "b2", "a2", "c"]
    outputs = [graph.call_function(torch.ops.aten.linear.default, (x, graph.get_attr(n))) for n in reads]
    graph.output(tuple(outputs))
    gm = torch.fx.GraphModule(root, graph)
    inputs = torch.randn(2, 3)
    before = gm(inputs)
    assert reshare_weights(gm) == 3  # both reads of b2, and a2
    assert [n.args[1].target for n in gm.graph.nodes if n.op == "call_function"] == ["a", "b", "b", "b", "a", "c"]
    assert not hasattr(gm, "b2") and not hasattr(gm, "a2")
    assert all(hasattr(gm, n) for n in ("a", "b", "c"))
    torch.testing.assert_close(gm(inputs), before, rtol=0, atol=0)
