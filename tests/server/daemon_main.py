"""Run the daemon with the in-code engine (for the subprocess test): python -m tests.server.daemon_main DIR."""

from __future__ import annotations

import sys

from runtime.config import DaemonConfig, DaemonSettings
from runtime.daemon import Daemon
from runtime.log import setup_logging
from runtime.server import ServerConfig
from runtime.server.synthetic import DEMO, SyntheticEngine

if __name__ == "__main__":
    setup_logging("INFO")
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{sys.argv[1]}/policy.sock",)),
        daemon=DaemonSettings(tick_s=0.05, graceful_timeout_s=2.0, stats_log_interval_s=0.2),
    )
    sys.exit(Daemon(config, engine_factory=lambda: SyntheticEngine(DEMO)).run())
