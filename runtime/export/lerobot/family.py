"""What a policy family's module provides to the generic export plan and graph.

The generic graph (runtime.export.lerobot.graph) does what every LeRobot policy shares: uint8
cameras to float channels-first, the preprocessor's normalisation, the batch of one, the
postprocessor's un-normalisation. A family supplies the rest: the LeRobot class, what it refuses, the
steps it serves, the noise it takes, the previous chunk it may be guided by (real-time chunking) and
the normalised chunk LeRobot's inference computes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from runtime.export.lerobot.loader import LoadedCheckpoint


class Family:
    """One policy family's part of the graph; a subclass per family, instantiated per loaded checkpoint."""

    policy_type: ClassVar[str]
    policy_class: ClassVar[tuple[str, str]]  # LeRobot's module and class name

    def __init__(self, loaded: LoadedCheckpoint) -> None:
        self.loaded = loaded
        self.policy = loaded.policy
        self.checkpoint = loaded.checkpoint

    def check(self) -> None:
        """Refuse, naming the way out, a configuration a program cannot hold (before any tracing)."""

    def usable_steps(self) -> int:
        """How many steps of the chunk :meth:`predict` returns can be served."""
        return self.checkpoint.chunk_size - self.first_step()

    def default_steps(self) -> int:
        """The steps served by default: those LeRobot's ``select_action`` executes per chunk."""
        return self.checkpoint.n_action_steps

    def first_step(self) -> int:
        """The first step of the chunk LeRobot executes."""
        return 0

    def language_inputs(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """The program's language inputs (name -> shape, dtype): the task's tokens, filled by the server."""
        return {}

    def language(self) -> dict[str, Any] | None:
        """For a policy that takes a task: ``export_bundle``'s ``language`` (tokenizer definition and fields)."""
        return None

    def example_language(self) -> dict[str, torch.Tensor]:
        """The test case's language inputs: a task string as the bundle's tokenizer encodes it."""
        return {}

    def noise_inputs(self) -> dict[str, tuple[int, ...]]:
        """The program's noise inputs (name -> shape), standard normals the server draws per request."""
        return {}

    def prefix_inputs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Real-time chunking's inputs (name -> shape, role: ``prefix``, ``prefix_weights``, ``guidance``),
        filled by the server from a request's leftover and delay; {} for a policy without them."""
        return {}

    def rtc(self) -> dict[str, Any] | None:
        """For a policy that takes a prefix: ``export_bundle``'s ``rtc`` (the RtcEntry fields)."""
        return None

    def example_prefix(self) -> dict[str, torch.Tensor]:
        """The test case's prefix inputs: a leftover in the action's units, its weights and cap."""
        return {}

    def predict(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor]) -> torch.Tensor:
        """The normalised chunk for a normalised, batched observation: (1, steps, action_dim)."""
        raise NotImplementedError

    def predict_guided(
        self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor], prefix: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """:meth:`predict` guided by the previous chunk: ``prefix`` holds the prefix inputs as the program
        takes them (the leftover in the action's units, ``[chunk_size, action_dim]``)."""
        raise NotImplementedError
