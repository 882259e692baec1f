"""Which LeRobot policy families the exporter knows, and what the checkpoint reader needs of each.

Torch-free on purpose: a checkpoint's ``config.json`` is checked (and a wrong one refused) before
torch or LeRobot is imported. What each family's graph does lives in its own module, named here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from runtime.export.lerobot.family import Family


@dataclass(frozen=True)
class FamilyConfig:
    module: str  # the module holding the family's Family subclass (FAMILY)
    chunk_field: str  # config.json: the steps the policy predicts per call
    steps_field: str  # config.json: the steps LeRobot executes from each chunk


FAMILIES: Final = {
    "act": FamilyConfig("runtime.export.lerobot.act", "chunk_size", "n_action_steps"),
    "diffusion": FamilyConfig("runtime.export.lerobot.diffusion", "horizon", "n_action_steps"),
    "tdmpc": FamilyConfig("runtime.export.lerobot.tdmpc", "horizon", "n_action_steps"),
    # VQ-BeT has no n_action_steps: select_action executes the whole chunk
    "vqbet": FamilyConfig("runtime.export.lerobot.vqbet", "action_chunk_size", "action_chunk_size"),
    "smolvla": FamilyConfig("runtime.export.lerobot.smolvla", "chunk_size", "n_action_steps"),
}
SUPPORTED_POLICIES: Final = tuple(FAMILIES)


def family_class(policy_type: str) -> type[Family]:
    """The Family subclass of a supported policy type (imports torch and the family's module)."""
    cls: type[Family] = importlib.import_module(FAMILIES[policy_type].module).FAMILY
    return cls
