"""``python -m tools.bench.field``: the daemon under the whole field workload at once, judged at the servos.

Everything is driven from outside, as a user would: the daemon is ``lerobot-runtime serve`` with a
generated TOML config, its arm a Feetech STS3215 chain simulated on a pseudo-terminal by a process of
its own at real-time priority that stamps each write as its bytes arrive; two synthetic cameras are
``lerobot-runtime camera`` processes; a teleop station (a process, its simulated leader on its own pty)
takes over the arm, streams leader targets at the control rate, moves the leader now and then and
records an episode from both cameras; a client process sends ``infer`` back to back the whole time.
Everything else goes over ZeroMQ (``control status``, ``control dump``, ``stats``).

Reported side by side from one run: the goal-write period error at the servos (p50/p99/max, periods
more than 5 ms off, periods with no write), the daemon's own ``write_period_error_ms`` and
``jitter_ms`` and how the two agree at p99, the simulator's floor measured beside it (a minimal
pinned writer to a second simulator), teleop latency (target sent -> the first servo write that
carries it, and leader move -> write), frames dropped per camera, the dataset check, the CPU flags.

``--kill`` then SIGKILLs the daemon's main process while the station (or, ``--kill policy``, the
policy) drives, and reports what the servos received after it. Every process the bench started, and
every child of the daemon, is stopped at the end however the bench ends.

The modules, one concern each:

- :mod:`.__main__`: the command line;
- :mod:`.config`: the workload's settings, its bundle and the daemon's generated config;
- :mod:`.processes`: the supervisor of every process the bench starts, and reading their output;
- :mod:`.servos`: the simulated servos' process (and the floor writer's), and the log they leave;
- :mod:`.station`: the teleop station's process, and the bench's handle on it;
- :mod:`.machine`: the machine beside the run (hypervisor steal, the kernel's pty workers, load);
- :mod:`.run`: one run, step by step, and what each step saw;
- :mod:`.measures`: pure functions over the servos' logs (write periods, teleop latency, after a kill);
- :mod:`.report`: what the run saw turned into the report;
- :mod:`.table`: the report as the table it prints.
"""
