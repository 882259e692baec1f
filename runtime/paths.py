"""Where the files that ship with lerobot-runtime live (``configs/``, ``systemd/``).

In a source checkout they sit next to the ``runtime`` package; an installed wheel puts them under
``<prefix>/share/lerobot-runtime``. ``$LEROBOT_RUNTIME_DATA`` overrides both.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def data_root() -> Path:
    if env := os.environ.get("LEROBOT_RUNTIME_DATA"):
        return Path(env)
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "configs").is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "lerobot-runtime"


def configs_dir() -> Path:
    return data_root() / "configs"
