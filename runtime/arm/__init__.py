"""The arm's own process and the daemon's link to it.

``process`` is what runs in the arm process (the control loop, the serial port, the envelope, the
flight recorder); ``link`` is the daemon's side (start, feed, supervise); ``messages`` is what crosses
between them, one frozen dataclass per kind, with the link's protocol version; ``codec`` turns those
messages into bytes and back and refuses what is none; ``wire`` is the socket they travel on. See
docs/control.md, "Who owns what".
"""
