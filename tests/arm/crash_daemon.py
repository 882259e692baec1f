"""The daemon from a config file, whose inference crashes the process natively once a trigger file
exists (``python -m tests.arm.crash_daemon CONFIG TRIGGER``): the fault a segfaulting plugin causes."""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from runtime.config import load_config
from runtime.daemon import Daemon
from runtime.engine.base import Engine
from runtime.engine.loader import load_engine
from runtime.log import setup_logging


def main() -> int:
    setup_logging("INFO")
    config = load_config(sys.argv[1])
    trigger = sys.argv[2]

    def factory() -> Engine:
        engine = load_engine(config.engine)
        run = engine.run_validated

        def crashing(arrays: list[Any]) -> Any:
            if os.path.exists(trigger):
                ctypes.string_at(0)  # SIGSEGV on the inference worker thread, as a native crash would
            return run(arrays)

        engine.run_validated = crashing  # type: ignore[method-assign]
        return engine

    return Daemon(config, engine_factory=factory, config_path=sys.argv[1]).run()


if __name__ == "__main__":
    sys.exit(main())
