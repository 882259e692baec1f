"""A bf16 program holding a 0-d bf16 constant lowers (OpenVINO's frontend cannot make one itself) and
computes with that constant's exact value."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.export
torch = pytest.importorskip("torch")
pytest.importorskip("executorch")


class Scaled(torch.nn.Module):
    """x * a 0-d bf16 tensor made in forward: torch.export lifts it into a constant of the graph."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.bfloat16) * torch.tensor(0.1234, dtype=torch.bfloat16)).float()


def test_a_program_with_a_0d_bf16_constant_lowers_and_computes_with_its_value() -> None:
    import openvino as ov
    from openvino.frontend.pytorch import fx_decoder

    from runtime.bundle.pte import parse_program
    from runtime.engine.openvino_engine import import_blob
    from runtime.export.export import lower_program

    x = torch.arange(1, 5, dtype=torch.float32)
    exported = torch.export.export(Scaled().eval(), (x,))
    assert any(t.dim() == 0 and t.dtype == torch.bfloat16 for t in exported.constants.values())
    before = fx_decoder.torch_tensor_to_ov_const
    program = lower_program(exported, "CPU")
    assert fx_decoder.torch_tensor_to_ov_const is before  # OpenVINO's own again after lowering
    method = parse_program(program, "scaled")["forward"]
    compiled, _ = import_blob(ov.Core(), bytes(method.delegates[0].payload), "CPU", {})
    got = compiled(x.numpy())[0]
    # 0.1234 in bf16 is 0.12353515625; the product rounded to bf16 or not, as the CPU computes it
    np.testing.assert_allclose(got, np.array([1, 2, 3, 4]) * 0.12353515625, rtol=2**-8, atol=0)
