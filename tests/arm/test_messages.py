"""The link's kinds of message: each named once, by its class; each sent by one side only."""

from __future__ import annotations

import dataclasses
from typing import get_args

from runtime.arm import messages
from runtime.arm.messages import ARM_MESSAGES, DAEMON_MESSAGES, KINDS, Message, kind_of


def test_a_kind_on_the_wire_is_its_class_name_in_snake_case() -> None:
    assert [KINDS[cls] for cls in DAEMON_MESSAGES] == [
        "init",
        "gate",
        "chunk",
        "target_put",
        "target_clear",
        "estop",
        "command_request",
        "dump",
        "shutdown_request",
    ]
    assert [KINDS[cls] for cls in ARM_MESSAGES] == [
        "waiting",
        "failed",
        "status_map",
        "ready",
        "tick",
        "loop_event",
        "ask",
        "observation",
        "dump_request",
        "dumped",
        "bye",
    ]
    assert kind_of(messages.EpisodeRecord) == "episode_record"  # type: ignore[arg-type]


def test_each_kind_is_sent_by_exactly_one_side_and_every_message_is_one_of_them() -> None:
    assert not set(DAEMON_MESSAGES) & set(ARM_MESSAGES)
    assert set(DAEMON_MESSAGES) | set(ARM_MESSAGES) == set(get_args(Message)) == set(KINDS)
    assert messages.Init in DAEMON_MESSAGES and messages.Tick in ARM_MESSAGES


def test_messages_are_frozen_values() -> None:
    for cls in KINDS:
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen, cls.__name__
        assert dataclasses.is_dataclass(cls)
