"""0-d bf16 constants made from their value while lowering, every other tensor left to OpenVINO's frontend
(the lowering of a whole program with one is tests/engine/test_scalar_constants.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def test_a_0d_bf16_tensor_becomes_a_bf16_constant_of_its_value() -> None:
    from runtime.export.scalar_constants import scalar_bf16_constant

    made = scalar_bf16_constant(torch.tensor(0.1234, dtype=torch.bfloat16))
    assert made.get_type_name() == "Constant"
    assert str(made.get_element_type()) == "<Type: 'bfloat16'>"
    assert list(made.get_output_shape(0)) == []
    # 0.1234 rounded to bf16 is 0.12353515625, f32 0x3DFD0000: its bf16 word is 0x3DFD
    assert int(np.asarray(made.get_data()).view(np.uint16)) == 0x3DFD


@pytest.mark.parametrize(
    "value",
    [
        torch.tensor(0.5, dtype=torch.float32),  # 0-d, not bf16
        torch.tensor([0.5], dtype=torch.bfloat16),  # bf16, not 0-d
        torch.tensor(3, dtype=torch.int64),
        0.5,  # not a tensor
    ],
    ids=["f32-scalar", "bf16-vector", "int-scalar", "float"],
)
def test_anything_else_is_left_to_openvino(value: Any) -> None:
    from runtime.export.scalar_constants import scalar_bf16_constant

    assert scalar_bf16_constant(value) is None


def test_the_frontend_makes_the_rest_and_gets_its_own_converter_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from openvino.frontend.pytorch import fx_decoder

    from runtime.export.scalar_constants import scalar_bf16_constants

    seen: list[tuple[Any, bool]] = []

    def frontend(tensor: Any, shared_memory: bool = True) -> Any:
        seen.append((tensor, shared_memory))
        return "frontend's"

    monkeypatch.setattr(fx_decoder, "torch_tensor_to_ov_const", frontend)
    vector = torch.ones(3, dtype=torch.bfloat16)
    with scalar_bf16_constants():
        convert = fx_decoder.torch_tensor_to_ov_const
        assert convert is not frontend
        assert convert(vector, shared_memory=False) == "frontend's"
        assert convert(vector) == "frontend's"
        assert convert(torch.tensor(2.0, dtype=torch.bfloat16)).get_type_name() == "Constant"
    assert seen == [(vector, False), (vector, True)]
    assert fx_decoder.torch_tensor_to_ov_const is frontend
    with pytest.raises(ValueError), scalar_bf16_constants():
        raise ValueError("lowering failed")
    assert fx_decoder.torch_tensor_to_ov_const is frontend
