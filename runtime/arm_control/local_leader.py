"""A leader arm plugged into the robot's own computer (``[teleop] leader_port``): the daemon reads it
itself and feeds the loop's teleop slot, no station and no network in between.

It reads at the control rate on its own thread (the bus read must not sit on the control tick).
While it runs, remote stations are refused (two leaders cannot both drive); operators switch the
source with ``lerobot-runtime control teleop`` (take over) and ``control start`` (hand back to the
policy). A failing leader read is logged once per failure run; the loop's deadman holds the arm.
"""

from __future__ import annotations

import logging
import threading
import time

from drivers.errors import BusError
from runtime.arm_control.interface import ArmControl
from runtime.control.clock import Ticker
from runtime.teleop.leader import LeaderArm

log = logging.getLogger(__name__)


class LocalLeader:
    def __init__(self, leader: LeaderArm, loop: ArmControl, who: str) -> None:
        leader.order(loop.names)
        self.leader = leader
        self.loop = loop
        self.who = who
        self.reads = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="local-leader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        ticker = Ticker(self.loop.period)
        ticker.start()
        seq = 0
        failing = False
        while not self._stop.is_set():
            ticker.wait()
            try:
                positions = self.leader.read()
            except BusError as e:
                self.failures += 1
                if not failing:
                    log.error("local leader (%s): read failed: %s; the deadman holds the arm", self.who, e)
                failing = True
                continue
            if failing:
                log.info("local leader (%s): reading again", self.who)
                failing = False
            seq += 1
            self.reads += 1
            self.loop.teleop.put(seq, positions, time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
        self.leader.close()
