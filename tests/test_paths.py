"""Where the shipped files are found: ``$LEROBOT_RUNTIME_DATA``, the checkout, or the install prefix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runtime import paths

CHECKOUT = Path(__file__).resolve().parents[1]


def test_a_checkout_serves_its_own_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEROBOT_RUNTIME_DATA", raising=False)
    assert paths.data_root() == CHECKOUT
    assert paths.configs_dir() == CHECKOUT / "configs"


def test_the_variable_wins_and_an_empty_one_is_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LEROBOT_RUNTIME_DATA", str(tmp_path))
    assert paths.data_root() == tmp_path
    assert paths.configs_dir() == tmp_path / "configs"
    monkeypatch.setenv("LEROBOT_RUNTIME_DATA", "")
    assert paths.data_root() == CHECKOUT


def test_an_install_without_configs_beside_the_package_uses_the_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LEROBOT_RUNTIME_DATA", raising=False)
    package = tmp_path / "site-packages" / "runtime"
    package.mkdir(parents=True)
    monkeypatch.setattr(paths, "__file__", str(package / "paths.py"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    assert paths.data_root() == tmp_path / "prefix" / "share" / "lerobot-runtime"
    assert paths.configs_dir() == tmp_path / "prefix" / "share" / "lerobot-runtime" / "configs"
    # a file named configs is not the folder
    (tmp_path / "site-packages" / "configs").write_text("")
    assert paths.data_root() == tmp_path / "prefix" / "share" / "lerobot-runtime"
    (tmp_path / "site-packages" / "configs").unlink()
    (tmp_path / "site-packages" / "configs").mkdir()
    assert paths.data_root() == tmp_path / "site-packages"
