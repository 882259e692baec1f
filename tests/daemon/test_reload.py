"""SIGHUP reloads what is safe, names what needs a restart, and never kills the daemon."""

from __future__ import annotations

import signal
from pathlib import Path

from runtime.client import PolicyClient
from tests.daemon.conftest import ServeProcess, write_config


def _config(directory: Path, bundle: Path, stats_s: float = 0.0, queue_depth: int = 4, extra: str = "") -> str:
    return f"""
[engine]
bundle = "{bundle}"
[server]
endpoints = ["ipc://{directory}/policy.sock"]
queue_depth = {queue_depth}
[arm]
kind = "sim"
[daemon]
tick_s = 0.05
stats_log_interval_s = {stats_s}
{extra}
"""


def test_sighup_reloads_safe_keys_and_names_the_rest(demo_bundle: Path, short_tmp: Path) -> None:
    config = write_config(short_tmp / "c.toml", _config(short_tmp, demo_bundle))
    serve = ServeProcess(config)
    try:
        serve.wait_line("ready: serving")
        write_config(config, _config(short_tmp, demo_bundle, stats_s=0.2, queue_depth=9))
        serve.proc.send_signal(signal.SIGHUP)
        line = serve.wait_line("reload (SIGHUP)")
        assert "reloading daemon.stats_log_interval_s" in line
        assert "needs a restart (kept as before): server.queue_depth" in line
        serve.wait_line("stats: requests:")  # the new interval is in force
        with PolicyClient(f"ipc://{short_tmp}/policy.sock", timeout_s=10) as client:
            assert client.hello().queue_depth == 4  # not changed under connected clients
        # a config that no longer parses changes nothing and keeps the daemon up
        write_config(config, _config(short_tmp, demo_bundle, extra="graceful_timeout_s = -1"))
        serve.proc.send_signal(signal.SIGHUP)
        assert "daemon.graceful_timeout_s" in serve.wait_line("reload (SIGHUP) refused")
        with PolicyClient(f"ipc://{short_tmp}/policy.sock", timeout_s=10) as client:
            assert client.ping().uptime_s > 0
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.wait() == 0, serve.output
    finally:
        serve.kill()
    assert "arm disconnected" in serve.output
