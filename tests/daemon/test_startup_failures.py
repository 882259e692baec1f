"""Every start-up failure is one clear log line and a non-zero exit status, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.daemon.conftest import ROOT

# Python raises exactly this when the kernel refuses a thread (a unit's MemoryMax= or TasksMax=);
# the failure is forced at the first thread the daemon starts, the inference worker.
_NO_THREADS = """
import sys, threading
from runtime.cli import main
real_start = threading.Thread.start
def start(self):
    if self.name == "lerobot-runtime-infer":
        raise RuntimeError("can't start new thread")
    real_start(self)
threading.Thread.start = start
sys.exit(main(["serve", "--config", sys.argv[1]]))
"""

_NO_MEMORY = """
import sys
import runtime.engine.loader as loader
from runtime.cli import main
def load_engine(*args, **kwargs):
    raise MemoryError()
loader.load_engine = load_engine
sys.exit(main(["serve", "--config", sys.argv[1]]))
"""


def _run(script: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_no_threads_left_is_one_line(short_tmp: Path) -> None:
    config = short_tmp / "c.toml"
    config.write_text(f'[server]\nendpoints = ["ipc://{short_tmp}/p.sock"]\n[arm]\nkind = "none"\n')
    done = _run(_NO_THREADS, config)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, done.stderr
    assert "serve failed: RuntimeError: can't start new thread; the process ran out of memory or threads" in errors[0]


def test_out_of_memory_is_one_line(short_tmp: Path) -> None:
    config = short_tmp / "c.toml"
    config.write_text(f'[engine]\nbundle = "{short_tmp}"\n[server]\nendpoints = ["ipc://{short_tmp}/p.sock"]\n')
    done = _run(_NO_MEMORY, config)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "serve failed: MemoryError: -; the process ran out of memory" in done.stderr
