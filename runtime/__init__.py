"""lerobot-runtime: the on-robot inference service for LeRobot-style arms.

Data flow, one folder per step: observation in (``runtime.server``, ``runtime.protocol``) ->
policy (``runtime.export`` makes a bundle, ``runtime.bundle`` reads it, ``runtime.engine`` runs it) ->
action chunk -> the arm process (``runtime.arm``, ``runtime.control``) -> ``drivers`` -> servos.
"""

__version__ = "0.1.0"
