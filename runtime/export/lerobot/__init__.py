"""From a LeRobot checkpoint directory (what ``save_pretrained`` writes) to an exportable graph.

The checkpoint is read with LeRobot's own classes (the ``lerobot`` extra), not re-implemented: the
policies' model code changes between LeRobot releases and a reader of our own would drift from it
silently, while LeRobot's own code stays right by construction, and the parity tests compare against
it. LeRobot is needed only to export, never on the robot (see docs/lerobot.md for the install).

The graph is the whole inference path of LeRobot's own pipeline, so a client sends what a robot
delivers and gets joint targets back: cameras as ``uint8`` H x W x 3, the preprocessor's
normalisation, the batch of one, the policy's inference, the postprocessor's un-normalisation.

Modules, each with one concern (none imports this package, so there is no import circle):

* ``families``: the supported policy types and what the config reader needs of each (torch-free);
* ``checkpoint``: ``config.json`` validated without LeRobot or torch;
* ``torchvision_shim``: importing LeRobot beside CPU torch, and saying what to install otherwise;
* ``loader``: the policy and its processors, loaded with LeRobot's own classes;
* ``family``: what a family's module provides to the generic graph;
* ``graph``: the generic traceable module (images, normalisation, batch) and its example inputs;
* ``plan``: the export plan and ``export_lerobot``;
* ``draws``: a policy's random draws read from noise inputs the server draws;
* ``act``, ``diffusion``, ``tdmpc``, ``vqbet``: what is specific to each family.
"""

from runtime.export.lerobot.checkpoint import CHECKPOINT_FILES, Checkpoint, Feature, joint_names, read_checkpoint
from runtime.export.lerobot.families import SUPPORTED_POLICIES
from runtime.export.lerobot.loader import LoadedCheckpoint, action_scale, load_checkpoint
from runtime.export.lerobot.plan import FEATURE_ROLES, export_lerobot, lerobot_export_plan
from runtime.export.lerobot.torchvision_shim import (
    INSTALL_HINT,
    SUPPORTED_LEROBOT,
    import_lerobot,
    lerobot_available,
)

__all__ = [
    "CHECKPOINT_FILES",
    "FEATURE_ROLES",
    "INSTALL_HINT",
    "SUPPORTED_LEROBOT",
    "SUPPORTED_POLICIES",
    "Checkpoint",
    "Feature",
    "LoadedCheckpoint",
    "action_scale",
    "export_lerobot",
    "import_lerobot",
    "joint_names",
    "lerobot_available",
    "lerobot_export_plan",
    "load_checkpoint",
    "read_checkpoint",
]
