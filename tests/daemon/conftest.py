"""Fixtures for daemon tests: a real notify socket that records datagrams, a daemon on a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from runtime.engine.base import Engine
from runtime.server.synthetic import DEMO, STATE, SyntheticEngine


class NotifyListener:
    """An AF_UNIX datagram socket standing in for systemd; keeps (monotonic time, text) of each datagram."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.05)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            self.messages.append((time.monotonic(), data.decode()))

    def texts(self) -> list[str]:
        return [m for _, m in list(self.messages)]

    def wait_for(self, needle: str, timeout: float = 60.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, text in list(self.messages):
                if needle in text:
                    return at
            time.sleep(0.01)
        pytest.fail(f"no notify datagram with {needle!r}; got {self.texts()}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1)
        self.sock.close()


@pytest.fixture
def notify_listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotifyListener]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lrt-n-") as d:
        listener = NotifyListener(Path(d) / "notify")
        yield listener
        listener.close()


class FreezingEngine(SyntheticEngine):
    """The in-code engine, except that an observation whose first joint is 99 hangs ``freeze_s``."""

    def __init__(self, freeze_s: float) -> None:
        super().__init__(DEMO)
        self.freeze_s = freeze_s

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        state = arrays[[s.name for s in self.manifest.inputs].index(STATE)]
        if float(state[0]) == 99.0:
            time.sleep(self.freeze_s)
        return super().run_validated(arrays)


def run_in_thread(target: Callable[[], int]) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(target()), daemon=True)
    thread.start()
    return thread, result


def engine_factory(engine: Engine) -> Callable[[], Engine]:
    return lambda: engine


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # ipc paths must fit in 107 bytes; pytest's tmp_path can be longer.
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lrt-") as d:
        yield Path(d)


ROOT = Path(__file__).resolve().parents[2]


class ServeProcess:
    """``lerobot-runtime serve --config FILE`` in a subprocess, its output read line by line."""

    def __init__(self, config: Path, notify: str | None = None, extra_env: dict[str, str] | None = None) -> None:
        import os
        import subprocess
        import sys

        env = {**os.environ, **(extra_env or {})}
        env.pop("WATCHDOG_USEC", None)
        env.pop("NOTIFY_SOCKET", None)
        if notify is not None:
            env["NOTIFY_SOCKET"] = notify
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime", "serve", "--config", str(config)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_line(self, needle: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if needle in line:
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.02)
        pytest.fail(f"no output line with {needle!r}; output so far:\n{self.output}")

    def wait(self, timeout: float = 60.0) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def write_config(path: Path, body: str) -> Path:
    path.write_text(body)
    return path
