"""Which LeRobot release traces a checkpoint: read from its config's fields, found among the Pythons there are."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runtime.errors import ExportError
from runtime.export.lerobot import stacks
from runtime.export.lerobot.stacks import Stack, find_stack, probe, release_of, unknown_fields, written_by


def test_the_release_that_wrote_a_config_is_the_newest_whose_markers_it_carries() -> None:
    assert written_by({"type": "act", "chunk_size": 100}) == "0.4"
    assert written_by({"type": "act", "pretrained_revision": None}) == "0.6"  # every 0.6 config has it
    assert written_by({"type": "diffusion", "pretrained_revision": "main", "gradient_checkpointing": False}) == "0.6"
    assert release_of("0.6.1") == "0.6" and release_of("0.4.4") == "0.4"


def test_descriptive_fields_are_ignored_and_fields_that_compute_are_refused_by_name(tmp_path: Path) -> None:
    where = tmp_path / "config.json"
    known = ["type", "chunk_size"]
    assert unknown_fields({"type": "act", "chunk_size": 1}, known, where) == []
    assert unknown_fields(
        {"type": "act", "gradient_checkpointing": False, "pretrained_revision": None}, known, where
    ) == [
        "gradient_checkpointing",
        "pretrained_revision",
    ]
    with pytest.raises(ExportError) as e:
        unknown_fields({"type": "pi05", "use_relative_actions": True, "pretrained_revision": None}, known, where)
    assert str(e.value).startswith(f"{where}: field(s) use_relative_actions are not known to the installed LeRobot ")
    assert "may change what the policy computes" in str(e.value) and "--lerobot-python" in str(e.value)


def _fake_python(path: Path, versions: dict[str, str]) -> str:
    """A 'Python' that answers the probe as one with these packages would."""
    import json

    path.write_text(f"#!/bin/sh\necho '{json.dumps(versions)}'\n")
    path.chmod(0o755)
    return str(path)


def test_a_python_is_asked_what_it_has(tmp_path: Path) -> None:
    py = _fake_python(tmp_path / "py06", {"lerobot": "0.6.1", "transformers": "5.5.4", "torch": "2.11.0"})
    assert probe(py) == Stack(py, "0.6.1", "5.5.4", "2.11.0", current=False)
    assert probe(_fake_python(tmp_path / "bare", {"lerobot": "not installed", "torch": "2.11.0"})) is None
    assert probe(str(tmp_path / "missing")) is None
    assert probe(sys.executable) is not None and probe(sys.executable).current  # type: ignore[union-attr]


def test_the_stack_of_the_release_is_found_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    py06 = _fake_python(tmp_path / "py06", {"lerobot": "0.6.1", "transformers": "5.5.4", "torch": "2.11.0"})
    monkeypatch.setenv(stacks.ENV_PYTHON, os.pathsep.join([str(tmp_path / "missing"), py06]))
    assert find_stack("0.6").python == py06
    assert find_stack("0.6", explicit=py06).release == "0.6"
    with pytest.raises(ExportError, match=r"--lerobot-python: .*missing cannot be run or has no LeRobot installed"):
        find_stack("0.6", explicit=str(tmp_path / "missing"))
    # the user's choice is the only one: another release there is refused, not passed over
    with pytest.raises(ExportError) as e:
        find_stack("0.4", explicit=py06, why="ck: ")
    assert str(e.value) == (
        f"ck: --lerobot-python: {py06} has LeRobot 0.6.1; the checkpoint was written by LeRobot 0.4.x and is "
        "traced by that release's own classes"
    )


def test_no_stack_of_the_release_is_refused_saying_what_was_found_and_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(stacks.ENV_PYTHON, "")
    monkeypatch.setattr(stacks, "PACKAGE_ROOT", tmp_path)  # no .venv-lerobot-* beside the checkout
    monkeypatch.setattr(stacks, "probe", lambda py: Stack(py, "0.4.4", "4.57.6", "2.13.0", True))
    with pytest.raises(ExportError) as e:
        find_stack("0.6", why="ck: ")
    said = str(e.value)
    assert said.startswith(
        "ck: the checkpoint was written by LeRobot 0.6.x and is traced by that release's own classes"
    )
    assert "found: LeRobot 0.4.4, transformers 4.57.6, torch 2.13.0 (this Python)" in said
    assert said.endswith(f"Install it: {stacks.STACK_HINT['0.6']}")


def test_the_pythons_asked_come_in_order_without_repeats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(stacks.ENV_PYTHON, os.pathsep.join(["/a", "/b", "/a"]))
    monkeypatch.setattr(stacks, "PACKAGE_ROOT", tmp_path)
    venvs = [str(tmp_path / f".venv-lerobot-{r}" / "bin" / "python") for r in stacks.RELEASES]
    assert stacks.candidates("/x") == ["/x", "/a", "/b", sys.executable, *venvs]
