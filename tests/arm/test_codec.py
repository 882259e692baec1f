"""The link's messages as bytes: every kind arrives equal field for field, the wire keeps its layout,
and anything that is not a message of this version is refused by name (which kind, which field, what
was expected, what came) with a LinkProtocolError, never another exception."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from drivers.bus import JointState
from drivers.config import ArmConfig
from runtime.arm import messages as m
from runtime.arm.codec import decode, encode
from runtime.control.config import ControlConfig
from runtime.control.feed import Blocked, Prefix
from runtime.control.latch import Latch
from runtime.control.mailbox import Release, Start, Stop, TakeOver
from runtime.control.mode import Mode
from runtime.control.snapshot import Snapshot
from runtime.control.target import Target
from runtime.errors import LinkProtocolError, LinkVersionError
from runtime.teleop.config import TeleopConfig
from tests.control.small_arm import interface

SNAPSHOT = Snapshot(
    tick=4321,
    at=12.25,
    next_due=12.283,
    mode=Mode.TELEOP,
    latch=Latch(7, "requested by the station", 11.5),
    latches_taken=7,
    present=np.array([1.5, -2.25, 3.0]),
    state={"shoulder_pan": JointState(12.5, 2190, 13.0, -4, 17, 12.1, 41)},
    arm_error="servo 3 timed out",
    queue_depth=42,
    dropped_actions=3,
    overruns=1,
    counters=Counter({"ticks": 4321, "writes": 4000}),
    safety={"limit": 2, "step": 0},
    last_latency_ticks=4.0,
    latencies_measured=9,
    teleop_phase="handover",
    teleop_last_seq=88,
    teleop_late=4,
    intervention=True,
    cpu_seen={0: 4321, 3: 2},
    scheduling="SCHED_FIFO 50",
    native_id=1234,
    last_write_at=12.251,
    last_write_error_ms=0.125,
    write_periods=3999,
    writes_off=2,
)
F32 = np.arange(12, dtype=np.float32).reshape(4, 3) * 0.5

#: one message of each kind, every field away from its default
SAMPLES: tuple[m.Message, ...] = (
    m.Init(
        m.LINK_VERSION,
        ControlConfig(rate_hz=8.0, rt_priority=0, streams=()),
        TeleopConfig(deadman_ms=150.0),
        ArmConfig(port="/dev/ttyTEST"),
        interface(),
        cpu=1,
        arm_wait_s=7.5,
        record=True,
    ),
    m.Gate(Blocked("stale:front", "stale observation stream: front", ("front",))),
    m.Chunk(3, actions=F32, error="kept beside the actions"),
    m.TargetPut(Target(5, np.array([1.0, 2.0, 3.0]), 7.5)),
    m.TargetClear(),
    m.Estop(Latch(4, "button", 499.0)),
    m.CommandRequest(Release("op", 4)),
    m.Dump(9, Path("/var/lib/x"), "estop", {"who": "op", "n": 2}),
    m.ShutdownRequest(),
    m.Waiting("the arm on /dev/ttyTEST does not answer; waiting"),
    m.Failed("no arm on /dev/ttyTEST"),
    m.StatusMap({"mode": "idle", "teleop": {"phase": ""}, "link": {"dropped": 0}}),
    m.Ready(4242, "memory locked", ("j1", "j2"), {"j1": 1.5, "j2": -2.0}),
    m.Tick(
        SNAPSHOT,
        m.EpisodeRecord(1.5, np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0]), "policy", True),
        episode_end=True,
    ),
    m.LoopEvent(30, "safety: a 100% step"),
    m.Ask(7, np.array([1.0, 2.0, 3.0], dtype=np.float32), True, Prefix(F32, 3)),
    m.Observation(np.array([4.0, 5.0, 6.0], dtype=np.float32), True),
    m.DumpRequest("stall rest"),
    m.Dumped(9, path=Path("/var/lib/x/flight.npz"), error="kept beside the path"),
    m.Bye(False),
)


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Equal field for field, arrays with their dtype and shape, containers by their items."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and b.dtype == a.dtype and b.shape == a.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(b) is type(a), where
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, Mapping):
        assert isinstance(b, Mapping) and set(a) == set(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert type(b) is type(a) and a == b, f"{where}: {a!r} != {b!r}"


def wire(message: m.Message) -> dict[str, Any]:
    """What ``message`` is on the wire, as a map."""
    d: dict[str, Any] = msgpack.unpackb(encode(message), raw=False, strict_map_key=False)
    return d


def raw(d: Any) -> bytes:
    data: bytes = msgpack.packb(d, use_bin_type=True)
    return data


def refused(d: Any) -> LinkProtocolError:
    with pytest.raises(LinkProtocolError) as e:
        decode(d if isinstance(d, bytes) else raw(d))
    return e.value


# --- round trips ------------------------------------------------------------------------------------


def test_the_samples_hold_one_message_of_every_kind() -> None:
    assert [type(s) for s in SAMPLES] == list(m.KINDS)


@pytest.mark.parametrize("message", SAMPLES, ids=lambda s: m.KINDS[type(s)])
def test_every_kind_arrives_equal_field_for_field(message: m.Message) -> None:
    back = decode(encode(message))
    assert type(back) is type(message)
    assert_same(message, back, m.KINDS[type(message)])
    assert wire(message)["t"] == m.KINDS[type(message)]


def test_a_snapshot_arrives_with_its_real_types() -> None:
    back = decode(encode(m.Tick(SNAPSHOT)))
    assert isinstance(back, m.Tick)
    snap = back.snapshot
    assert snap.mode is Mode.TELEOP and snap.source == SNAPSHOT.source
    assert isinstance(snap.latch, Latch) and isinstance(snap.counters, Counter)
    assert isinstance(snap.state["shoulder_pan"], JointState)
    assert snap.present is not None and snap.present.dtype == np.float64
    nan = decode(encode(m.Tick(Snapshot())))
    assert isinstance(nan, m.Tick) and math.isnan(nan.snapshot.last_latency_ticks)
    assert nan.snapshot.present is None and nan.snapshot.latch is None
    ints = decode(encode(m.Tick(Snapshot(present=np.array([1, 2], dtype=np.int64)))))
    assert isinstance(ints, m.Tick) and ints.snapshot.present is not None
    assert ints.snapshot.present.dtype == np.float64 and ints.snapshot.present.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "uint8", "int16", "bool"])
def test_arrays_keep_dtype_shape_and_values_and_are_the_receivers_own(dtype: str) -> None:
    a = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    back = decode(encode(m.Observation(a, False)))
    assert isinstance(back, m.Observation)
    assert back.state.dtype == a.dtype and back.state.shape == a.shape
    np.testing.assert_array_equal(back.state, a)
    assert back.state.flags.writeable  # a copy, not a view of the datagram
    sliced = decode(encode(m.Observation(np.arange(10.0)[::2], False)))  # not contiguous: sent as its values
    assert isinstance(sliced, m.Observation) and sliced.state.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_the_episode_record_and_the_target_travel_as_float64() -> None:
    record = m.EpisodeRecord(
        2.0, np.array([1, 2], dtype=np.int32), None, np.array([0.5], dtype=np.float32), "hold", False
    )
    back = decode(encode(m.Tick(Snapshot(), record)))
    assert isinstance(back, m.Tick) and back.episode is not None
    assert back.episode.present is not None and back.episode.present.dtype == np.float64
    assert back.episode.present.tolist() == [1.0, 2.0] and back.episode.goal is None
    assert back.episode.requested is not None and back.episode.requested.tolist() == [0.5]
    target = decode(encode(m.TargetPut(Target(1, np.array([1, 2, 3]), 8))))
    assert isinstance(target, m.TargetPut)
    assert target.target.positions.dtype == np.float64 and target.target.received_at == 8.0


@pytest.mark.parametrize("command", [Start("op"), TakeOver("st"), Stop(), Release("op", 4), Release()])
def test_every_command_arrives_as_itself(command: Any) -> None:
    back = decode(encode(m.CommandRequest(command)))
    assert isinstance(back, m.CommandRequest) and back.command == command


# --- the layout on the wire ----------------------------------------------------------------------------


def test_fields_at_their_default_are_left_out_and_taken_as_the_default() -> None:
    assert wire(m.Gate()) == {"t": "gate"}
    assert wire(m.Chunk(3, error="no chunk")) == {"t": "chunk", "id": 3, "error": "no chunk"}
    assert set(wire(m.Tick(Snapshot()))) == {"t", "snapshot"}
    assert set(wire(m.Ask(1, np.zeros(2), False))) == {"t", "id", "state", "reset"}
    assert decode(raw({"t": "dumped", "id": 2})) == m.Dumped(2)
    assert decode(raw({"t": "target_clear"})) == m.TargetClear()


def test_the_wire_keeps_its_layout() -> None:
    """What the other end's code (and ``bench ipc``) reads: arrays as [dtype, shape, bytes], a latch as a
    list, a command as its word."""
    a = np.array([[1.0, 2.0]], dtype=np.float32)
    assert wire(m.Chunk(1, actions=a)) == {"t": "chunk", "id": 1, "actions": ["<f4", [1, 2], a.tobytes()]}
    assert wire(m.Estop(Latch(4, "button", 1.5))) == {"t": "estop", "latch": [4, "button", 1.5]}
    assert wire(m.CommandRequest(TakeOver("st"))) == {"t": "command_request", "command": ["teleop", "st", 0]}
    assert wire(m.Gate(Blocked("k", "why", ("a", "b")))) == {"t": "gate", "blocked": ["k", "why", ["a", "b"]]}
    assert wire(m.TargetPut(Target(2, np.array([1.0]), 3.0))) == {"t": "target_put", "target": [2, [1.0], 3.0]}
    init = wire(SAMPLES[0])
    assert init["version"] == m.LINK_VERSION and init["arm"] == asdict(ArmConfig(port="/dev/ttyTEST"))
    snap = wire(m.Tick(SNAPSHOT))["snapshot"]
    assert set(snap) == set(Snapshot.__slots__)  # every field, by its own name
    assert snap["state"] == {"shoulder_pan": [12.5, 2190, 13.0, -4, 17, 12.1, 41]}
    assert snap["mode"] == "teleop" and snap["latch"] == [7, "requested by the station", 11.5]
    assert snap["present"] == [1.5, -2.25, 3.0] and snap["cpu_seen"] == {0: 4321, 3: 2}


def test_what_is_not_a_message_is_not_sent() -> None:
    with pytest.raises(TypeError, match=r"^not a link message: dict$"):
        encode({"t": "gate"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="can not serialize 'object' object"):
        encode(m.StatusMap({"odd": object()}))
    with pytest.raises(OverflowError):
        encode(m.StatusMap({"big": 1 << 70}))


# --- refusals, by name ------------------------------------------------------------------------------------


def test_a_datagram_cut_short_is_refused_as_not_msgpack() -> None:
    data = encode(m.Tick(SNAPSHOT))
    e = refused(data[: len(data) // 2])
    assert str(e).startswith(f"a link message of {len(data) // 2} bytes that is not msgpack: ")
    assert (e.kind, e.field, e.expected, e.received) == (None, None, "one msgpack map", f"{len(data) // 2} bytes")
    assert isinstance(e, ValueError)


@pytest.mark.parametrize(
    ("sent", "says", "received"),
    [
        ([1, 2], "a link message must be a msgpack map naming its kind in 't', got [1, 2] (list)", "[1, 2] (list)"),
        (b"\x00", "a link message must be a msgpack map naming its kind in 't', got 0 (int)", "0 (int)"),
    ],
)
def test_a_datagram_that_is_no_map_is_refused(sent: Any, says: str, received: str) -> None:
    e = refused(sent)
    assert str(e) == says and (e.expected, e.received) == ("a map", received)


def test_an_unknown_kind_is_refused_naming_it_and_the_known_ones() -> None:
    e = refused({"t": "dance", "x": 1})
    known = ", ".join(m.KINDS.values())
    assert str(e) == f"a link message of kind 'dance' (str); this version knows {known}"
    assert (e.kind, e.field, e.expected, e.received) == ("dance", "t", f"one of {known}", "'dance' (str)")
    e = refused({"id": 1})
    assert str(e).startswith("a link message of no kind; this version knows init, ")
    assert (e.kind, e.received) == (None, "nothing")
    assert refused({"t": 3}).kind is None  # a kind that is no string is named as what came


def test_a_kind_the_other_side_sends_is_refused_where_it_only_could_be_sent() -> None:
    data = encode(m.Tick(Snapshot()))
    with pytest.raises(LinkProtocolError) as e:
        decode(data, m.DAEMON_MESSAGES)
    assert str(e.value).startswith(
        "a 'tick' message is the arm process's to send, and this end sent none: it takes init, gate"
    )
    assert (e.value.kind, e.value.field) == ("tick", "t")
    assert isinstance(decode(data, m.ARM_MESSAGES), m.Tick)


def test_a_missing_field_is_refused_naming_the_kind_the_field_and_what_it_takes() -> None:
    e = refused({"t": "estop"})
    assert str(e) == "the daemon's 'estop' message has no 'latch' (expected [id, reason, requested_at])"
    assert (e.kind, e.field, e.expected, e.received) == ("estop", "latch", "[id, reason, requested_at]", "nothing")
    snap = wire(m.Tick(Snapshot()))["snapshot"]
    del snap["overruns"]
    e = refused({"t": "tick", "snapshot": snap})
    assert str(e) == "the arm process's 'tick' message has no 'snapshot.overruns' (expected an integer)"


def test_a_field_of_the_wrong_type_is_refused_naming_what_it_takes_and_what_came() -> None:
    e = refused({"t": "bye", "ok": 1})
    assert str(e) == "the arm process's 'bye' message: 'ok' expected true or false, got 1 (int)"
    assert (e.kind, e.field, e.expected, e.received) == ("bye", "ok", "true or false", "1 (int)")
    e = refused({"t": "chunk", "id": "7"})
    assert str(e) == "the daemon's 'chunk' message: 'id' expected an integer, got '7' (str)"
    e = refused({"t": "chunk", "id": True})  # a boolean is no integer here
    assert (e.field, e.received) == ("id", "True (bool)")
    e = refused({"t": "loop_event", "level": 30, "text": None})
    assert (e.field, e.expected, e.received) == ("text", "a string", "None (NoneType)")


def test_a_wrong_value_deep_in_a_message_is_named_by_its_path() -> None:
    snap = wire(m.Tick(SNAPSHOT))["snapshot"]
    snap["tick"] = 1.5
    e = refused({"t": "tick", "snapshot": snap})
    assert str(e) == "the arm process's 'tick' message: 'snapshot.tick' expected an integer, got 1.5 (float)"
    snap = wire(m.Tick(SNAPSHOT))["snapshot"]
    snap["state"]["shoulder_pan"] = [1.0, 2.0]
    e = refused({"t": "tick", "snapshot": snap})
    assert e.field == "snapshot.state.shoulder_pan"
    assert e.expected == "[position, raw_position, goal, velocity_raw, load_raw, voltage_v, temperature_c]"
    snap = wire(m.Tick(SNAPSHOT))["snapshot"]
    snap["mode"] = "dancing"
    e = refused({"t": "tick", "snapshot": snap})
    assert e.field == "snapshot.mode" and e.expected == f"one of {', '.join(Mode)}"
    e = refused({"t": "estop", "latch": [4, "button", "soon"]})
    assert str(e) == "the daemon's 'estop' message: 'latch.requested_at' expected a number, got 'soon' (str)"
    e = refused({"t": "gate", "blocked": ["k", "why", "front"]})
    assert (e.field, e.expected) == ("blocked.stale", "a list of strings")
    e = refused({"t": "ready", "pid": 1, "memory": "", "joints": ["a"], "positions": {"a": "high"}})
    assert (e.field, e.expected, e.received) == ("positions.a", "a number", "'high' (str)")


def test_a_field_this_version_does_not_know_is_refused() -> None:
    e = refused({"t": "gate", "blocked": None, "colour": "red"})
    assert str(e) == "the daemon's 'gate' message: 'colour' is a field this version does not know (it knows blocked)"
    assert (e.kind, e.field) == ("gate", "colour")
    assert refused({"t": "shutdown_request", "now": True}).field == "now"
    snap = wire(m.Tick(Snapshot()))["snapshot"]
    snap["spare"] = 0
    assert refused({"t": "tick", "snapshot": snap}).field == "snapshot.spare"


@pytest.mark.parametrize(
    ("array", "field", "says"),
    [
        (["|O", [1], b"\x00" * 8], "state.dtype", "expected a numeric dtype, got '|O' (str)"),
        (["<U1", [1], b"\x00" * 4], "state.dtype", "expected a numeric dtype, got '<U1' (str)"),
        (["no such dtype", [1], b""], "state.dtype", "expected a numeric dtype, got 'no such dtype' (str)"),
        (["<f4", [2, 3], b"\x00" * 20], "state", "holds 20 bytes where shape [2, 3] of <f4 takes 24"),
        (["<f4", [-1], b""], "state.shape", "expected a list of sizes, got [-1] (list)"),
        (["<f4", [1]], "state", "expected an array [dtype, shape, bytes] of a numeric dtype, got ['<f4', [1]] (list)"),
    ],
)
def test_an_array_that_is_not_one_is_refused(array: list[Any], field: str, says: str) -> None:
    e = refused({"t": "observation", "state": array, "reset": False})
    assert e.field == field
    assert str(e) == f"the arm process's 'observation' message: {field!r} {says}"


def test_a_command_this_version_does_not_know_is_refused_naming_the_known_words() -> None:
    e = refused({"t": "command_request", "command": ["dance", "op", 0]})
    assert str(e) == (
        "the daemon's 'command_request' message: 'command.word' command: expected one of start, teleop, stop, "
        "release, got 'dance'"
    )
    assert e.field == "command.word"
    # a shutdown has its own kind: as a word it is refused, never taken for another command
    assert refused({"t": "command_request", "command": ["shutdown", "daemon", 0]}).field == "command.word"


def test_a_configuration_section_that_does_not_parse_is_refused_naming_it() -> None:
    init = wire(SAMPLES[0])
    e = refused({**init, "control": {"rate": 1}})
    assert e.field == "control"
    assert str(e).startswith(
        "the daemon's 'init' message: 'control' is not a [control] table this version takes: "
        "control: unknown key(s) rate; expected some of "
    )
    e = refused({**init, "policy": {"policy_name": ""}})
    assert e.field == "policy" and (
        "is not a policy interface this version takes: the daemon's policy interface: field 'policy_name': "
        "expected the policy's name, got ''"
    ) in str(e)


def test_an_extension_type_is_refused() -> None:
    e = refused(raw({"t": "bye", "ok": msgpack.ExtType(5, b"x")}))
    assert "msgpack extension type 5 is not part of the link" in str(e)


# --- the version ------------------------------------------------------------------------------------------


def test_a_daemon_of_another_version_is_refused_naming_both_versions() -> None:
    init = wire(SAMPLES[0])
    with pytest.raises(LinkVersionError) as e:
        decode(raw({**init, "version": m.LINK_VERSION + 1}))
    assert str(e.value) == (
        f"the daemon speaks link protocol version {m.LINK_VERSION + 1}, this arm process speaks version "
        f"{m.LINK_VERSION}: the two come from different installs; restart the service so that both are the "
        "installed one"
    )
    assert (e.value.kind, e.value.field) == ("init", "version")
    assert (e.value.expected, e.value.received) == (str(m.LINK_VERSION), f"version {m.LINK_VERSION + 1}")
    assert isinstance(e.value, LinkProtocolError)


def test_the_version_is_read_before_the_fields_another_version_lays_out_otherwise() -> None:
    with pytest.raises(LinkVersionError) as e:
        decode(raw({"t": "init", "version": m.LINK_VERSION + 1, "configuration": {}}))
    assert e.value.received == f"version {m.LINK_VERSION + 1}"
    with pytest.raises(LinkVersionError) as e:
        decode(raw({"t": "init", "control": {}}))  # a daemon from before there were versions
    assert str(e.value).startswith(
        "the daemon speaks link protocol no version (one before version 1), "
        f"this arm process speaks version {m.LINK_VERSION}"
    )
    with pytest.raises(LinkVersionError) as e:
        decode(raw({"t": "init", "version": "1"}))
    assert e.value.received == "version '1' (str)"


# --- nothing else escapes ----------------------------------------------------------------------------------


def test_a_corrupted_message_is_refused_and_never_raises_anything_else() -> None:
    """Every message cut at every length, and with bytes flipped at random: decode answers with a message
    or a LinkProtocolError, whatever came."""
    rng = random.Random(33)
    refusals = 0
    for message in SAMPLES:
        data = encode(message)
        variants = [data[:n] for n in range(0, len(data), max(1, len(data) // 40))]
        for _ in range(40):
            b = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            variants.append(bytes(b))
        for variant in variants:
            try:
                decode(variant)
            except LinkProtocolError:
                refusals += 1
    assert refusals > len(SAMPLES) * 40  # most are refused; none raised another error
