"""The arm's own process and the daemon's link to it.

``process`` is what runs in the arm process (the control loop, the serial port, the envelope, the
flight recorder); ``link`` is the daemon's side (start, feed, supervise); ``wire`` is what crosses
between them. See docs/control.md, "Who owns what".
"""
