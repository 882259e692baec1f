"""The engine seam: a loaded policy program that maps named input arrays to named output arrays.

Two implementations sit behind it: ``OpenVINOEngine`` (the delegate blob imported straight into
OpenVINO, no torch) and ``ExecuTorchEngine`` (the ExecuTorch runtime with its OpenVINO delegate).
An engine is not thread-safe: one worker thread owns it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from runtime.bundle.bundle import TestCase
from runtime.bundle.manifest import Manifest
from runtime.engine.validate import validate_inputs

if TYPE_CHECKING:
    from runtime.engine.parity import PendingGate

EngineName = Literal["openvino", "executorch"]


@dataclass(frozen=True)
class EngineInfo:
    """What the engine really runs with, read back from the backend after loading."""

    engine: EngineName
    device: str
    # the precision the outputs carry: the lower of the program's own (bf16/f16 compiled into the
    # graph, int8 quantised) and the device's arithmetic (see runtime.engine.precision)
    precision: str
    threads: int
    cpus: tuple[int, ...]  # the CPU set inference runs on
    bundle: str
    program: str
    openvino_version: str
    arithmetic: str = ""  # what the device's matrix products and convolutions ran at, from its execution graph

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpus"] = list(self.cpus)
        return d


class Engine(ABC):
    """A loaded, ready-to-run policy program."""

    def __init__(self, manifest: Manifest, info: EngineInfo) -> None:
        self.manifest = manifest
        self.info = info
        # the bundle's test case once the parity gate passed on this engine: the serving canary replays it
        self.test_case: TestCase | None = None
        # the replays of that gate still to run before it computes anything else (a staged load), or None
        self.pending_gate: PendingGate | None = None

    def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Validate ``inputs`` against the manifest, run the program, return outputs by name.

        Raises :class:`~runtime.errors.InputValidationError` naming the bad input, or
        :class:`~runtime.errors.InferenceError` carrying the backend's own reason.
        """
        return self.run_validated(validate_inputs(self.manifest.inputs, inputs))

    @abstractmethod
    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Run on arrays already checked and ordered as ``manifest.inputs``."""

    def close(self) -> None:  # noqa: B027 - engines without native handles need nothing here
        """Release native resources."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
