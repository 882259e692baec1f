"""Tracing a LeRobot checkpoint in the Python of the release that wrote it: the child and its parent's side.

The parent (``export --lerobot``, in the Python with ExecuTorch) runs
``PYTHON -m runtime.export.lerobot.trace_child CHECKPOINT OUT_DIR OPTIONS_JSON`` with this package on
``PYTHONPATH``, so the child runs the same exporter code on its own LeRobot, transformers and torch;
the child writes a trace (runtime.export.trace) that the parent lowers and proves. The child needs
LeRobot's stack and numpy, nothing of ExecuTorch, OpenVINO or this project's other dependencies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from runtime.errors import ExportError


def trace_in(python: str, checkpoint: Path, options: dict[str, Any]) -> Any:
    """Trace ``checkpoint`` in a child on ``python``; the Trace it wrote. Its log lines reach this stderr."""
    from runtime.export.lerobot.stacks import PACKAGE_ROOT
    from runtime.export.trace import read_trace

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="lerobot-trace-") as tmp:
        out = Path(tmp) / "trace"
        command = [python, "-m", __name__, str(checkpoint), str(out), json.dumps(options)]
        status = subprocess.run(command, env=env, check=False).returncode
        if status == 2:  # the child's own refusal, already said on stderr in one line
            raise ExportError(f"tracing {checkpoint} with {python} was refused (see the line above)")
        if status != 0:
            raise ExportError(f"tracing {checkpoint} with {python} failed (exit status {status}); see its output above")
        return read_trace(out)


def main(argv: list[str]) -> int:
    from runtime.export.lerobot.plan import trace_lerobot
    from runtime.export.trace import write_trace
    from runtime.log import setup_logging

    setup_logging()
    checkpoint, out, options = argv[0], argv[1], json.loads(argv[2])
    try:
        trace = trace_lerobot(checkpoint, **options)
    except ExportError as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 2
    write_trace(trace, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
