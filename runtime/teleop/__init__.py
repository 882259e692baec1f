"""Field teleop: an operator's station drives the arm through the daemon's control loop.

``config`` (the ``[teleop]`` table), ``target`` (the one-slot handoff of the newest leader pose and the
hand-over from another source), ``session`` (which station holds the arm), ``handler`` (``teleop.*``
requests), ``leader`` (reading a leader arm, torque off), ``station`` (the operator's side) and
``terminal`` (its raw keyboard).
"""
