"""Precision names, their order, and what an execution graph says ran: on OpenVINO's types and on
stand-in compiled models (no export; a real compiled graph is in tests/engine/test_precision.py)."""

from __future__ import annotations

from types import SimpleNamespace

import openvino as ov
import pytest

from runtime.engine.precision import OV_HINT, executed_precision, lower_of, ov_precision_name


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("bf16", "bf16"),
        ("BF16", "bf16"),
        ("<Type: 'bfloat16'>", "bf16"),
        ("f16", "f16"),
        ("<Type: 'f16'>", "f16"),
        ("<Type: 'float16'>", "f16"),
        ("FP16", "f16"),
        ("f32", "f32"),
        ("<Type: 'f32'>", "f32"),
        ("<Type: 'float32'>", "f32"),
        ("FP32", "f32"),
        ("i8", "int8"),
        ("I8", "int8"),
        ("u8", "int8"),
        ("<Type: 'int8_t'>", "int8"),
        ("<Type: 'uint8_t'>", "int8"),
    ],
)
def test_precision_names(value: str, name: str) -> None:
    assert ov_precision_name(value) == name


@pytest.mark.parametrize(
    ("t", "name"),
    [(ov.Type.f32, "f32"), (ov.Type.bf16, "bf16"), (ov.Type.f16, "f16"), (ov.Type.i8, "int8"), (ov.Type.u8, "int8")],
)
def test_openvino_types_by_their_type_name_and_their_text(t: ov.Type, name: str) -> None:
    assert ov_precision_name(t) == name
    assert ov_precision_name(str(t)) == name


def test_an_unknown_type_is_its_lower_case_text() -> None:
    assert ov_precision_name("<Type: 'Dynamic'>") == "<type: 'dynamic'>"
    assert ov_precision_name(SimpleNamespace(get_type_name=lambda: "I64")) == "i64"


def test_lower_of_orders_precisions_by_exactness() -> None:
    assert lower_of("f32", "bf16") == "bf16"
    assert lower_of("f16", "f32") == "f16"
    assert lower_of("int8", "f32") == "int8"
    assert lower_of("f32", "f32") == "f32"
    assert lower_of("bf16", "f16") == "bf16"
    assert lower_of("f16", "bf16") == "bf16"
    assert lower_of("int8", "bf16", "f16") == "int8"
    assert lower_of("f16") == "f16"


def test_lower_of_ignores_unknown_names_and_defaults_to_f32() -> None:
    assert lower_of("f64", "f16", "") == "f16"
    assert lower_of("i64") == "f32"
    assert lower_of() == "f32"


def test_the_hint_for_each_program_precision() -> None:
    assert OV_HINT == {"f32": "f32", "f16": "f16", "bf16": "bf16", "int8": None}


class Value:
    def __init__(self, text: str) -> None:
        self.text = text

    def astype(self, t: type) -> str:
        assert t is str
        return self.text


def op(layer: str | None, precision: str | None) -> SimpleNamespace:
    info = {}
    if layer is not None:
        info["layerType"] = Value(layer)
    if precision is not None:
        info["runtimePrecision"] = Value(precision)
    return SimpleNamespace(get_rt_info=lambda: info)


class Compiled:
    def __init__(self, ops: list[SimpleNamespace] | None, hint: object = ov.Type.f32) -> None:
        self.ops = ops
        self.hint = hint
        self.asked: list[str] = []

    def get_runtime_model(self) -> SimpleNamespace:
        if self.ops is None:
            raise RuntimeError("no execution graph on this device")
        return SimpleNamespace(get_ops=lambda: self.ops)

    def get_property(self, name: str) -> object:
        self.asked.append(name)
        return self.hint


@pytest.mark.parametrize(
    "layer",
    ["FullyConnected", "MatMul", "Convolution", "GroupConvolution", "Deconvolution", "ScaledDotProductAttention"],
)
def test_each_compute_layer_counts(layer: str) -> None:
    compiled = Compiled([op("FullyConnected", "f32"), op(layer, "bf16"), op("Eltwise", "f32")])
    assert executed_precision(compiled) == "bf16"
    assert compiled.asked == []


def test_the_least_exact_compute_layer_wins_whatever_the_order() -> None:
    assert executed_precision(Compiled([op("MatMul", "bf16"), op("Convolution", "f16"), op("MatMul", "f32")])) == "bf16"
    assert executed_precision(Compiled([op("MatMul", "f32"), op("Convolution", "f16")])) == "f16"
    assert executed_precision(Compiled([op("MatMul", "FP32"), op("Convolution", "f32")])) == "f32"


def test_element_wise_int8_and_unlabelled_layers_are_left_out() -> None:
    compiled = Compiled(
        [
            op("Eltwise", "bf16"),
            op("Convolution", "I8"),
            op("MatMul", "u8"),
            op(None, "bf16"),
            op("MatMul", None),
            op("FullyConnected", "f32"),
        ],
        hint=ov.Type.bf16,
    )
    assert executed_precision(compiled) == "f32"


def test_without_a_compute_layer_the_hint_says(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = Compiled([op("Eltwise", "f32"), op("Convolution", "i8")], hint=ov.Type.bf16)
    assert executed_precision(compiled) == "bf16"
    assert compiled.asked == ["INFERENCE_PRECISION_HINT"]


def test_without_an_execution_graph_the_hint_says() -> None:
    compiled = Compiled(None, hint=ov.Type.f16)
    assert executed_precision(compiled) == "f16"
    assert compiled.asked == ["INFERENCE_PRECISION_HINT"]
