"""End-to-end benchmark harnesses, run from a checkout (``python -m tools.bench.<name>``), not installed.

Each drives the daemon or its parts from outside on simulated servos and reports what it measured:

- :mod:`tools.bench.field`: the daemon under the whole field workload at once (two cameras, a teleop
  station, recording, back-to-back infers), judged at the servos;
- :mod:`tools.bench.ipc`: the arm process's link beside ZeroMQ ipc and shared memory;
- :mod:`tools.bench.rtc`: the goals at chunk boundaries with real-time chunking and without.

The timing benchmarks an operator runs on the robot itself (``lerobot-runtime bench engine``, ``serve``,
``bus``, ``loop``, ``soak``, ``teleop``, ``record``, ``canary``) ship with the package in
:mod:`runtime.bench`.
"""
