"""The arm's own process and what crosses its link to the daemon.

``process`` is what runs in the arm process (the control loop of :mod:`runtime.control`, the serial
port, the envelope, the flight recorder); ``collector`` gathers its records; ``messages`` is what
crosses between it and the daemon, one frozen dataclass per kind, with the link's protocol version;
``codec`` turns those messages into bytes and back and refuses what is none; ``wire`` is the socket
they travel on. The daemon's end is :mod:`runtime.arm_control.link`. See docs/control.md, "Who owns
what".
"""
