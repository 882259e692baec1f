"""The tools' entry points set up logging as the command line does: each test gets the root logger back."""

from __future__ import annotations

from tests.commands.conftest import _restore_logging

__all__ = ["_restore_logging"]
