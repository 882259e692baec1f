"""The daemon lifecycle: startup, a ticking main loop, shutdown in a fixed order.

Shaped like uvicorn's ``Server``: signal handlers only set flags; the main thread ticks every
``daemon.tick_s`` and does periodic work in :meth:`Daemon.on_tick` (systemd watchdog, stats log
line); the first SIGINT/SIGTERM asks for a graceful stop (queued infers may finish within
``daemon.graceful_timeout_s``), a second SIGINT forces it. systemd hears READY=1 only once the
engine is loaded, its parity gate passed and every socket is bound.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from runtime.arm_monitor import ArmMonitor
from runtime.config import DaemonConfig
from runtime.engine.base import Engine
from runtime.sdnotify import SystemdNotifier
from runtime.server.server import PolicyServer
from runtime.server.stats import stats_line

log = logging.getLogger(__name__)

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Daemon:
    def __init__(
        self,
        config: DaemonConfig,
        engine_factory: Callable[[], Engine] | None = None,
        notifier: SystemdNotifier | None = None,
    ) -> None:
        self.config = config
        self.engine_factory = engine_factory if engine_factory is not None else self._load_engine
        self.notifier = notifier if notifier is not None else SystemdNotifier.from_env()
        self.server: PolicyServer | None = None
        self.arm: ArmMonitor | None = None
        self.should_exit = False
        self.force_exit = False
        self.failed = False
        self._last_watchdog = 0.0
        self._last_stats = 0.0
        self._last_arm_poll = 0.0
        self._previous_handlers: dict[int, Any] = {}

    def _load_engine(self) -> Engine:
        from runtime.engine.loader import load_engine

        return load_engine(self.config.engine)

    # --- signals -----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals can only be handled on the main thread (e.g. when run inside tests)
        for sig in HANDLED_SIGNALS:
            self._previous_handlers[sig] = signal.signal(sig, self.handle_exit)

    def restore_signal_handlers(self) -> None:
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers.clear()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Only flags: the main loop does the work on its next tick.
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    # --- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        self.install_signal_handlers()
        try:
            self.startup()
            self.main_loop()
        finally:
            self.shutdown()
            self.restore_signal_handlers()
        return 1 if self.failed else 0

    def startup(self) -> None:
        self.notifier.status("loading the policy")
        server = PolicyServer(self.engine_factory, self.config.server)
        server.start()  # loads on the worker thread, raises on a failed parity gate or bind
        self.server = server
        if self.config.arm.kind != "none":
            self.notifier.status("connecting the arm")
            self.arm = ArmMonitor(self.config.arm)
            self.arm.open()
        info = server.info
        where = ", ".join(server.bound_endpoints)
        arm = f"; arm {self.config.arm.kind}" if self.arm is not None else "; no arm"
        status = f"serving {info.policy_name} on {info.device}/{info.precision} at {where}{arm}"
        now = time.monotonic()
        self._last_watchdog = self._last_stats = self._last_arm_poll = now
        self.notifier.ready(status)
        log.info("ready: %s", status)

    def main_loop(self) -> None:
        tick = self.config.daemon.tick_s
        while not self.should_exit:
            time.sleep(tick)
            self.on_tick(time.monotonic())
            if self.server is not None and not self.server.running:
                log.error("the server's I/O thread stopped; exiting")
                self.failed = True
                break

    def on_tick(self, now: float) -> None:
        interval = self.notifier.watchdog_interval_s
        if interval is not None and now - self._last_watchdog >= interval:
            self.notifier.watchdog()
            self._last_watchdog = now
        if self.arm is not None and now - self._last_arm_poll >= self.config.daemon.arm_poll_s:
            self._last_arm_poll = now
            self.arm.poll()
        every = self.config.daemon.stats_log_interval_s
        if every > 0 and self.server is not None and now - self._last_stats >= every:
            self._last_stats = now
            line = stats_line(self.server.snapshot())
            if self.arm is not None:
                line += f"; arm {'ok' if self.arm.healthy else 'FAILING: ' + self.arm.last_error}"
            log.info("stats: %s", line)
            self.notifier.status(line)

    def shutdown(self) -> None:
        """STOPPING=1, stop the server (graceful unless forced), release the arm, log the final stats."""
        self.notifier.stopping("shutting down")
        server, self.server = self.server, None
        try:
            self._stop_server(server)
        finally:
            arm, self.arm = self.arm, None
            if arm is not None and not arm.close():
                self.failed = True
            self.notifier.close()

    def _stop_server(self, server: PolicyServer | None) -> None:
        if server is not None:
            timeout = 0.0 if self.force_exit else self.config.daemon.graceful_timeout_s
            log.info(
                "stopping (%s)", "forced" if self.force_exit else f"up to {timeout:g} s for queued requests"
            )
            server.stop(timeout, force=lambda: self.force_exit)
            log.info("final stats: %s", stats_line(server.snapshot()))
