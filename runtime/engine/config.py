"""Engine settings: which program, on which device, with which precision and CPU set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runtime.errors import ConfigError

EngineChoice = Literal["auto", "openvino", "executorch"]
PrecisionChoice = Literal["auto", "f32", "f16", "bf16"]


@dataclass(frozen=True)
class EngineConfig:
    """The ``[engine]`` table of the daemon config and the options of ``lerobot-runtime check``.

    ``bundle`` empty means the built-in demo bundle (built on first use). ``devices`` is a preference
    list: the first one OpenVINO sees *and* the bundle has a program for is used. ``cpus`` is the
    inference CPU set (empty: every CPU but the control-loop CPU); ``threads`` 0 means one per CPU of
    that set. ``precision`` "auto" keeps the precision the program was lowered with. The parity
    gate replays the test case ``parity_runs`` times in a row (the first is the cold inference), each
    result checked; ``warmup_runs`` more follow before the engine is ready. The daemon is ready once the
    first ``ready_runs`` of them passed (the cold one and one warm one, by default): the inference
    worker runs the others before it serves anything, so no chunk is computed before the whole gate
    passed, and they are the warm-up.
    ``accept_lower_arithmetic``: let the executorch engine serve a program at the device's default
    arithmetic when that is less exact than the program (an f32 program on a CPU with native bf16,
    where ExecuTorch 1.5.1's backend cannot ask OpenVINO for f32); held to that precision's tolerance.
    Off, such a load is refused with the ways out.
    """

    bundle: str = ""
    engine: EngineChoice = "auto"
    devices: tuple[str, ...] = ("NPU", "GPU", "CPU")
    precision: PrecisionChoice = "auto"
    cpus: tuple[int, ...] = ()
    control_cpu: int = 0
    threads: int = 0
    cache_dir: str = ""
    warmup_runs: int = 1
    parity_runs: int = 16
    ready_runs: int = 2
    allow_parity_failure: bool = False
    accept_lower_arithmetic: bool = False

    def __post_init__(self) -> None:
        for dev in self.devices:
            if dev not in ("CPU", "GPU", "NPU"):
                raise ConfigError(f"engine.devices: expected CPU, GPU or NPU, got {dev!r}")
        if not self.devices:
            raise ConfigError("engine.devices: expected at least one of CPU, GPU, NPU, got an empty list")
        if self.threads < 0:
            raise ConfigError(f"engine.threads: expected 0 (auto) or a positive count, got {self.threads}")
        if self.warmup_runs < 0:
            raise ConfigError(f"engine.warmup_runs: expected >= 0, got {self.warmup_runs}")
        if self.parity_runs < 1:
            raise ConfigError(f"engine.parity_runs: expected >= 1 replays of the test case, got {self.parity_runs}")
        if self.ready_runs < 1:
            raise ConfigError(
                f"engine.ready_runs: expected >= 1 replays of the test case before the daemon is ready, got "
                f"{self.ready_runs}"
            )
        if any(c < 0 for c in self.cpus) or len(set(self.cpus)) != len(self.cpus):
            raise ConfigError(f"engine.cpus: expected distinct CPU numbers >= 0, got {list(self.cpus)}")
