"""Choosing the inference device: the first preferred one present with a program, each one passed over
given its reason, and the refusal naming every reason and the bundle's programs."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from runtime.engine.devices import DeviceChoice, base_device, choose_device, present_devices
from runtime.errors import DeviceError


def test_a_device_number_is_dropped() -> None:
    assert base_device("GPU.1") == "GPU"
    assert base_device("GPU.0.1") == "GPU"
    assert base_device("CPU") == "CPU"


def test_present_devices_are_openvino_devices_by_kind_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    core = SimpleNamespace(available_devices=["NPU", "GPU.1", "CPU", "GPU.0"])
    monkeypatch.setitem(sys.modules, "openvino", SimpleNamespace(Core=lambda: core))
    assert present_devices() == ["CPU", "GPU", "NPU"]


def test_the_real_present_devices_have_the_cpu() -> None:
    assert "CPU" in present_devices()


def test_the_first_preference_present_with_a_program_is_chosen() -> None:
    programs = {"CPU": object(), "GPU": object()}
    assert choose_device(["GPU", "CPU"], ["CPU", "GPU"], programs, "b") == DeviceChoice("GPU", ())
    assert choose_device(["CPU", "GPU"], ["CPU", "GPU"], programs, "b") == DeviceChoice("CPU", ())


def test_each_device_passed_over_has_its_reason() -> None:
    programs = {"CPU": object(), "GPU": object()}
    c = choose_device(["NPU", "GPU", "CPU"], ["CPU", "NPU"], programs, "/b")
    assert c == DeviceChoice(
        "CPU",
        (
            "NPU: present, but the bundle has no NPU program (make one with: lerobot-runtime lower /b --device NPU)",
            "GPU: not present (OpenVINO sees CPU, NPU)",
        ),
    )


def test_no_usable_device_is_refused_with_every_reason() -> None:
    with pytest.raises(DeviceError) as info:
        choose_device(["NPU", "GPU"], ["NPU", "CPU"], {"CPU": object(), "GPU": object()}, "b")
    assert str(info.value) == (
        "no usable inference device: NPU: present, but the bundle has no NPU program "
        "(make one with: lerobot-runtime lower b --device NPU); GPU: not present (OpenVINO sees CPU, NPU). "
        "Bundle programs: CPU, GPU"
    )


def test_nothing_present_and_no_program() -> None:
    with pytest.raises(DeviceError) as info:
        choose_device(["CPU"], [], {}, "b")
    assert str(info.value) == "no usable inference device: CPU: not present (OpenVINO sees none). Bundle programs: none"


def test_no_preference_at_all() -> None:
    with pytest.raises(DeviceError) as info:
        choose_device([], ["CPU"], {"CPU": object()}, "b")
    assert str(info.value) == "no usable inference device: . Bundle programs: CPU"
