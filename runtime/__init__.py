"""lerobot-runtime: the on-robot inference service for LeRobot-style arms.

Data flow, one folder per step: observation in (``runtime.server``, ``runtime.protocol``) ->
policy (``runtime.bundle``, ``runtime.engine``) -> action chunk -> ``drivers`` -> servos.
"""

__version__ = "0.1.0"
