"""Field teleop, the operator's side: a station reads a leader arm and drives the arm through the daemon.

``config`` (the ``[teleop]`` table), ``leader`` (reading a leader arm, torque off), ``station`` (the
operator's side of the session) and ``terminal`` (its raw keyboard). The daemon's side (sessions, the
``teleop.*`` requests, a leader on the daemon's own computer) is in :mod:`runtime.arm_control`; the
loop's following of the newest target, with the hand-over, is :mod:`runtime.control.target`.
"""
