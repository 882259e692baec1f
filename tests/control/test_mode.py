"""Modes and sources: the wire words, and the recorder's mode codes that old recordings use."""

from __future__ import annotations

from runtime.control.mode import MOVING, Mode, Source, source_of
from runtime.control.recorder import MODE_CODE, MODES


def test_mode_values_are_the_wire_words_in_the_recorders_code_order() -> None:
    # codes written into recordings before modes were an enum: they must keep their meaning
    assert MODES == ("idle", "running", "holding", "resting", "estopped", "teleop")
    assert [MODE_CODE[m] for m in Mode] == list(range(6))
    assert Mode("teleop") is Mode.TELEOP and Mode.TELEOP.value == "teleop"


def test_each_mode_has_one_source() -> None:
    assert source_of(Mode.RUNNING) is Source.POLICY
    assert source_of(Mode.TELEOP) is Source.TELEOP
    assert {source_of(m) for m in Mode if m not in (Mode.RUNNING, Mode.TELEOP)} == {Source.HOLD}
    assert Mode.HOLDING not in MOVING and Mode.ESTOPPED not in MOVING and Mode.IDLE not in MOVING
