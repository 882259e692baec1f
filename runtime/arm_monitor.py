"""The arm as the daemon holds it: connected at start-up, watched, released at shutdown.

The daemon connects the configured arm (the simulated SO-101 by default) and disconnects it on the
way out, which turns torque off. Health comes from the control loop's own reads once the loop runs
(one thread owns the serial port); without a loop, the monitor reads the state every
``daemon.arm_poll_s`` to notice a vanished port or a servo fault.

:meth:`ArmMonitor.status` is the arm's health as clients and operators see it (``hello``, ``stats``,
``lerobot-runtime status``, metrics), and ``on_change`` fires as soon as health or the e-stop state
changes, so the daemon can tell systemd at once. Whoever owns the e-stop (the control loop) reports
it with :meth:`ArmMonitor.set_estop`; whoever reads the joints may hand the reading to
:meth:`ArmMonitor.observe` instead of letting :meth:`ArmMonitor.poll` read the bus itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from drivers.arm import open_arm, start_sim_arm
from drivers.bus import JointState, SerialServoBus
from drivers.calibration import load_calibration
from drivers.config import ArmConfig
from drivers.errors import BusError, CalibrationError, ServoFaultError, UnknownJointError
from drivers.sim.arm import SimArm
from runtime.control.snapshot import Snapshot

log = logging.getLogger(__name__)

# what waiting for the arm cannot fix: a wrong calibration, a servo's fault, a joint not on the bus
_NOT_WAITED_FOR = (CalibrationError, ServoFaultError, UnknownJointError)


class ArmReadings(Protocol):
    """The control loop, through its per-tick snapshot of its own reads."""

    def snapshot(self) -> Snapshot: ...


class ArmMonitor:
    def __init__(
        self,
        config: ArmConfig,
        bus: SerialServoBus | None = None,
        on_change: Callable[[ArmMonitor], None] | None = None,
    ) -> None:
        """``bus``: an already connected bus to hold instead of opening one from ``config``.
        ``on_change``: called (on the polling thread) when health or the e-stop state changes."""
        self.config = config
        self.bus: SerialServoBus | None = bus
        self.on_change = on_change
        self.healthy = False
        self.last_error = ""
        self.last_state: dict[str, JointState] = {}
        self.reads = 0
        self.failures = 0
        self._failure: BusError | None = None  # the last failed read's error, for open() to chain
        #: the simulated arm (``kind = "sim"``): its servos show what the arm received
        self.sim: SimArm | None = None
        #: the control loop, once it owns the port: health is taken from its reads
        self.source: ArmReadings | None = None
        self.estop = False
        self.estop_reason = ""
        self._own_bus = bus is None  # a bus we opened is ours to drop between attempts
        # replaced whole, never mutated: other threads (the server's I/O thread) read it lock-free
        self._status: dict[str, Any] = self._build_status()

    def open(self) -> None:
        """Connect the arm and read it once; raises the bus error if the arm cannot be reached."""
        cfg = self.config
        where = "simulated servos on a pseudo-terminal" if cfg.kind == "sim" else cfg.port
        if self.bus is None:
            if cfg.kind == "sim":
                self.sim = start_sim_arm(cfg, load_calibration(cfg.calibration))
                self.bus = self.sim.bus
            else:
                self.bus = open_arm(cfg)
        self.poll()
        if not self.healthy:
            raise BusError(
                f"arm ({cfg.kind}, {where}) connected but its first read failed: {self.last_error}"
            ) from self._failure
        positions = ", ".join(f"{n} {s.position:.1f}" for n, s in self.last_state.items())
        log.info("arm connected: %s %s on %s; positions %s", cfg.model, cfg.kind, where, positions)

    def open_waiting(
        self,
        wait_s: float,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        on_wait: Callable[[str], object] = lambda text: None,
        retry_s: float = 1.0,
    ) -> None:
        """:meth:`open`, retrying for up to ``wait_s`` seconds while the arm is absent or silent.

        A USB adapter can enumerate after the service starts, and an arm's power can come on later
        than the computer's. ``on_wait`` hears what is awaited (once per distinct reason); a wrong
        calibration or a servo fault is not waited for. Raises the last error when time runs out,
        or :class:`InterruptedError` when ``should_stop`` turns true.
        """
        where = "simulated servos" if self.config.kind == "sim" else self.config.port
        deadline = time.monotonic() + wait_s
        last = ""
        while True:
            try:
                self.open()
                return
            except _NOT_WAITED_FOR:
                raise
            except BusError as e:
                if isinstance(e.__cause__, _NOT_WAITED_FOR):  # a servo fault at the first read
                    raise
                self._drop_bus()
                left = deadline - time.monotonic()
                if left <= 0:
                    if wait_s <= 0:
                        raise
                    raise BusError(f"no arm on {where} after waiting {wait_s:g} s (daemon.arm_wait_s): {e}") from e
                if str(e) != last:
                    last = str(e)
                    log.warning("waiting up to %.0f s for the arm on %s: %s", left, where, e)
                    on_wait(f"waiting for the arm on {where} ({left:.0f} s left): {e}")
            stop_at = time.monotonic() + retry_s
            while time.monotonic() < stop_at:
                if should_stop():
                    raise InterruptedError("stopped while waiting for the arm")
                time.sleep(0.05)

    def _drop_bus(self) -> None:
        bus = self.bus
        if bus is None or not self._own_bus:
            return
        self.bus, self.sim = None, None
        try:
            bus.disconnect()
        except BusError as e:
            log.debug("closing the unanswering arm: %s", e)

    def poll(self) -> None:
        """Read every joint once; log only changes between healthy and failing."""
        if self.bus is None and self.source is None:
            return
        try:
            if self.source is not None:
                snap = self.source.snapshot()
                if snap.arm_error:
                    raise BusError(snap.arm_error)
                state = dict(snap.state)
            elif self.bus is not None:
                state = self.bus.read_state()
            else:
                return
        except BusError as e:
            self.observe_failure(e)
            return
        self.observe(state)

    def observe(self, state: Mapping[str, JointState]) -> None:
        """A successful read of every joint (by :meth:`poll` or by whoever drives the arm)."""
        self.last_state = dict(state)
        self.reads += 1
        was = self.healthy
        if not self.healthy and self.last_error:
            log.info("arm read works again after: %s", self.last_error)
        self.healthy = True
        self._publish(changed=not was)

    def observe_failure(self, error: BusError) -> None:
        """A failed read or write on the arm's bus."""
        self.failures += 1
        self._failure = error
        was, before = self.healthy, self.last_error
        if self.healthy or not self.last_error:
            log.error("arm read failed: %s", error)
        self.healthy, self.last_error = False, str(error)
        self._publish(changed=was or before != self.last_error)

    def set_estop(self, engaged: bool, reason: str = "") -> None:
        """Report the e-stop state (engaged, and why) from whoever owns it."""
        if engaged == self.estop and reason == self.estop_reason:
            return
        self.estop, self.estop_reason = engaged, reason if engaged else ""
        if engaged:
            log.error("e-stop engaged: %s", reason or "no reason given")
        else:
            log.warning("e-stop released")
        self._publish(changed=True)

    def _build_status(self) -> dict[str, Any]:
        temps = [s.temperature_c for s in self.last_state.values()]
        return {
            "kind": self.config.kind,
            "healthy": self.healthy,
            "last_error": self.last_error,
            "estop": self.estop,
            "estop_reason": self.estop_reason,
            "temperature_c": {n: s.temperature_c for n, s in self.last_state.items()},
            "temperature_max_c": max(temps) if temps else None,
            "reads": self.reads,
            "failures": self.failures,
        }

    def _publish(self, changed: bool) -> None:
        self._status = self._build_status()
        if changed and self.on_change is not None:
            self.on_change(self)

    def status(self) -> dict[str, Any]:
        """Health, e-stop and temperatures as of the last read (safe to call from any thread)."""
        return self._status

    def describe(self) -> str:
        """One short phrase for STATUS= and the stats line."""
        if self.estop:
            return f"arm E-STOP: {self.estop_reason or 'engaged'}"
        return "arm ok" if self.healthy else f"arm FAILING: {self.last_error}"

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.config.kind,
            "healthy": self.healthy,
            "reads": self.reads,
            "failures": self.failures,
            "last_error": self.last_error,
            "positions": {n: round(s.position, 2) for n, s in self.last_state.items()},
        }

    def close(self) -> bool:
        """Disconnect (torque off by default, the port closed in the driver's finally).

        Returns False, after logging why, when torque could not be confirmed off.
        """
        bus, self.bus = self.bus, None
        if bus is None:
            if self.sim is not None:  # the arm process drove it and has closed its own port
                self.sim.simulator.stop()
                self.sim = None
            return True
        try:
            bus.disconnect()
        except BusError as e:
            log.error("arm disconnected, but turning torque off failed: %s; check the arm by hand", e)
            return False
        log.info("arm disconnected")
        return True
