"""Choosing the inference device: the first preferred device that is present and has a program."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from runtime.errors import DeviceError


def base_device(name: str) -> str:
    """``GPU.1`` -> ``GPU``: bundles hold one program per device kind."""
    return name.split(".", 1)[0]


# The CPU features that decide what OpenVINO's CPU kernels compute (said with every measurement).
ARITHMETIC_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_int8")


def cpu_flags() -> str:
    """This CPU's ARITHMETIC_FLAGS, as ``avx2 avx512f avx512_bf16`` (from /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((x for x in f if x.startswith("flags")), "")
    except OSError:
        return "unknown CPU"
    flags = set(line.split(":", 1)[-1].split())
    return " ".join(f for f in ARITHMETIC_FLAGS if f in flags) or "no AVX2"


def present_devices() -> list[str]:
    import openvino as ov

    return sorted({base_device(d) for d in ov.Core().available_devices})


@dataclass(frozen=True)
class DeviceChoice:
    device: str
    skipped: tuple[str, ...]  # one reason per preferred device passed over


def choose_device(
    preferences: Iterable[str], present: Iterable[str], programs: Mapping[str, object], bundle: str
) -> DeviceChoice:
    present_set = set(present)
    seen = ", ".join(sorted(present_set)) or "none"
    skipped: list[str] = []
    for dev in preferences:
        if dev not in present_set:
            skipped.append(f"{dev}: not present (OpenVINO sees {seen})")
        elif dev not in programs:
            skipped.append(
                f"{dev}: present, but the bundle has no {dev} program "
                f"(make one with: lerobot-runtime lower {bundle} --device {dev})"
            )
        else:
            return DeviceChoice(dev, tuple(skipped))
    raise DeviceError(
        "no usable inference device: " + "; ".join(skipped) + f". Bundle programs: {', '.join(programs) or 'none'}"
    )
