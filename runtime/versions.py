"""Installed package versions, as recorded in bundles and checked when loading them."""

from __future__ import annotations

from importlib import metadata


def package_version(dist: str) -> str:
    """The installed version of ``dist``, or "not installed"."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"
