"""Tiny programs exported with the real exporter once, kept in a cache on disk for later runs.

Exporting even a one-op program takes seconds (torch.export, ExecuTorch's lowering, an OpenVINO compile),
and mutation testing runs a scope's tests once per mutant: the tests that need a real ``.pte`` read it
from ``$LEROBOT_RUNTIME_TEST_PROGRAMS`` (default ``.cache/test-programs`` in the checkout, beside the
bundles the suite exports; ``tools/mutation.py`` points its scratch copies at the checkout's), where
the first run writes it. A program's
file name carries a digest of its definition and of the torch, ExecuTorch and OpenVINO versions, so a
change to either exports it again.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any


def _two_outputs() -> tuple[Any, tuple[Any, ...]]:
    """action = x @ W (W = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]) and extra = 2 * y."""
    import torch

    class TwoOutputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.arange(12, dtype=torch.float32).reshape(4, 3))

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x @ self.w, y * 2.0

    return TwoOutputs().eval(), (torch.zeros(2, 4), torch.zeros(3))


def _every_dtype() -> tuple[Any, tuple[Any, ...]]:
    """One input of each dtype the manifest may declare, summed as float32 into a vector of 2."""
    import torch

    class EveryDtype(torch.nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return sum((x.to(torch.float32) for x in xs), torch.zeros(2))

    dtypes = (torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.float32, torch.bool)
    return EveryDtype().eval(), tuple(torch.zeros(2, dtype=d) for d in dtypes)


PROGRAMS: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "two_outputs": _two_outputs,
    "every_dtype": _every_dtype,
}


def program(name: str) -> bytes:
    """The ``.pte`` of program ``name`` lowered for the CPU, exported on first use."""
    make = PROGRAMS[name]
    versions = "|".join(version(p) for p in ("torch", "executorch", "openvino"))
    digest = hashlib.sha256(f"{versions}\n{inspect.getsource(make)}".encode()).hexdigest()[:16]
    default = Path(__file__).resolve().parents[2] / ".cache" / "test-programs"
    cache = Path(os.environ.get("LEROBOT_RUNTIME_TEST_PROGRAMS") or default)
    path = cache / f"{name}-{digest}.pte"
    if path.exists():
        return path.read_bytes()
    import torch

    from runtime.export.export import lower_program

    model, example = make()
    before = os.sched_getaffinity(0)
    try:
        with torch.no_grad():
            data = lower_program(torch.export.export(model, example), "CPU")
    finally:
        os.sched_setaffinity(0, before)
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")
    partial.write_bytes(data)
    os.replace(partial, path)  # whole or not at all, should two runs export at once
    return data
