"""The daemon's side of arm control: what runs in the daemon for the loop in the arm process.

``interface`` is :class:`~runtime.arm_control.interface.ArmControl`, the one way the daemon's parts
(the handlers, teleop, recording, the benches) reach the arm; ``link`` is its implementation (start
the arm process, feed it, supervise it); ``handler`` answers ``control.*`` requests, ``teleop`` and
``teleop_session`` the ``teleop.*`` ones, ``local_leader`` reads a leader arm on this computer;
``streams`` receives the camera streams and ``feed`` adds their newest parts to the loop's requests
for a chunk; ``episodes`` records the loop's ticks with those frames; ``report`` turns the
loop's status map into the few lines ``control status`` prints. Nothing in the arm process
imports this package (``tests/test_layering.py``).
"""
