"""What ``lerobot-runtime control status`` prints: the loop's status map as a few lines, the
important facts first.

The map is the one ``control.status`` answers (``ControlLoop.status``, or the arm process's through
``ArmLink.status``); ``--json`` prints it whole. Read, never trusted to be complete: a key an older
daemon does not send is shown as unknown and named on a last ``missing`` line, never a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SOURCES = {
    "policy": "the policy commands the arm",
    "teleop": "a teleop station commands the arm",
    "hold": "nothing commands the arm",
}
# counters of ticks or requests the arm did not get what it should: name -> what it means
STALLS = (
    ("starved", "starved {n} ticks (no action due)"),
    ("blocked_ticks", "blocked {n} ticks (the policy could not be asked)"),
    ("deadman_ticks", "deadman {n} ticks (no teleop target)"),
    ("inference_stalls", "{n} requests unanswered past safety.stall_timeout_s"),
    ("stall_actions", "safety.stall_action taken {n} times"),
)
START = "`lerobot-runtime control start` runs the policy"


class _Reader:
    """Looks keys up in the map, noting the ones that are not there."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        self.status = status
        self.missing: list[str] = []

    def need(self, *path: str) -> Any:
        """The value at ``path``, None (and noted as missing) when the map has no such key."""
        node: Any = self.status
        for i, key in enumerate(path):
            if not isinstance(node, Mapping) or key not in node:
                name = ".".join(path[: i + 1])
                if name not in self.missing:
                    self.missing.append(name)
                return None
            node = node[key]
        return node

    def mapping(self, *path: str) -> Mapping[str, Any]:
        """The map at ``path``, empty (and noted as missing) when it is not there or not a map."""
        value = self.need(*path)
        if value is not None and not isinstance(value, Mapping):
            self.missing.append(".".join(path))
        return value if isinstance(value, Mapping) else {}


def _num(value: Any, unit: str = "") -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    text = f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
    return text + unit


def format_control_status(status: Mapping[str, Any]) -> str:
    r = _Reader(status)
    lines = [
        _control_line(r),
        _estop_line(r),
        _arm_line(r),
        _policy_line(r),
        _chunks_line(r),
        _stalls_line(r),
        _timing_line(r),
        _writes_line(r),
        _safety_line(r),
    ]
    teleop = _teleop_line(r)
    if teleop:
        lines.append(teleop)
    recording = status.get("recording")
    if isinstance(recording, Mapping):
        lines.append(_recording_line(recording))
    if r.missing:
        lines.append(
            f"missing    {', '.join(r.missing)} (not in the reply: an older daemon, or the loop not started; "
            "--json shows what it sent)"
        )
    return "\n".join(lines)


def _control_line(r: _Reader) -> str:
    mode, source, tick, rate = r.need("mode"), r.need("source"), r.need("tick"), r.need("rate_hz")
    line = f"control    {mode or 'unknown mode'}, " + SOURCES.get(str(source), f"source {source or 'unknown'}")
    line += f"; tick {_num(tick)} at {_num(rate, ' Hz')}"
    task = r.status.get("task")
    if task:
        line += f"; task {task!r}"
    if mode in ("idle", "holding"):
        line += f"; {START}"
    return line


def _estop_line(r: _Reader) -> str:
    estop = r.mapping("estop")
    if not estop:
        return "e-stop     unknown"
    if not estop.get("latched"):
        return "e-stop     released"
    latch = estop.get("latch", "?")
    reason = estop.get("reason") or "no reason given"
    return (
        f"e-stop     LATCHED (latch {latch}): {reason}; release: `lerobot-runtime control release` "
        "(that latch), then `control start`"
    )


def _arm_line(r: _Reader) -> str:
    arm = r.mapping("arm")
    if not arm:
        line = "arm        unknown"
    elif arm.get("healthy"):
        line = "arm        answering"
    else:
        line = f"arm        FAILING: {arm.get('error') or 'no error given'}"
    process = r.status.get("process")  # only when the loop runs in an arm process of its own
    if isinstance(process, Mapping):
        if process.get("alive"):
            line += f"; arm process {process.get('pid', '?')} running"
        else:
            line += f"; arm process DEAD: {process.get('death') or 'no reason given'}"
    return line


def _policy_line(r: _Reader) -> str:
    blocked, stale = r.need("blocked"), r.need("stale_streams")
    policy = r.status.get("policy")  # which policy drives: absent from an older daemon
    line = "policy     " + _driver(policy if isinstance(policy, Mapping) else {})
    if blocked:
        line += f"NOT ASKED: {blocked}"
    elif blocked is None and stale is None:
        line += "unknown whether it may be asked"
    else:
        line += "may be asked"
    if stale and not (blocked and all(str(s) in str(blocked) for s in stale)):
        line += f" (stale streams: {', '.join(str(s) for s in stale)})"
    depth, steps, refill = r.need("queue_depth"), r.need("n_action_steps"), r.need("refill_at")
    return line + f"; {_num(depth)} actions queued, the next chunk asked at {_num(refill)} left of {_num(steps)}"


def _driver(policy: Mapping[str, Any]) -> str:
    """Which policy drives and where: ``act in this daemon; `` or ``act at tcp://h:p (remote, link up,
    round trip p50 3.1 / p99 5.2 ms over 40); ``; "" from a daemon that does not say."""
    name = policy.get("policy") or "the policy"
    if policy.get("where") == "local":
        return f"{name} in this daemon; "
    if policy.get("where") != "remote":
        return ""
    trips = policy.get("round_trip") if isinstance(policy.get("round_trip"), Mapping) else {}
    assert isinstance(trips, Mapping)
    trip = (
        f"round trip p50 {_num(trips.get('p50_ms'), ' ms')} / p99 {_num(trips.get('p99_ms'), ' ms')} "
        f"over {trips.get('count')}"
        if trips.get("count")
        else "no round trip measured yet"
    )
    remote = f"{name} at {policy.get('endpoint')} (remote, link {policy.get('link')}, {trip}); "
    fallback = policy.get("fallback") if isinstance(policy.get("fallback"), Mapping) else None
    if fallback is not None and policy.get("driving") == "local fallback":
        return f"the local fallback {fallback.get('name')} drives, not {remote}"
    return remote


def _chunks_line(r: _Reader) -> str:
    counters = r.mapping("counters")
    if "counters" in r.missing:
        line = "chunks     unknown"
    else:
        line = f"chunks     {_num(counters.get('chunks', 0))} from {_num(counters.get('requests', 0))} requests"
    extra = [
        f"{counters[key]} {what}"
        for key, what in (
            ("submit_refused", "refused by the server"),
            ("inference_failures", "failed"),
            ("chunks_discarded", "discarded"),
        )
        if counters.get(key)
    ]
    if extra:
        line += f" ({', '.join(extra)})"
    latency = r.mapping("inference_latency_ticks")
    if latency.get("last") is None:
        return line + "; latency: no chunk measured yet"
    return line + (
        f"; latency last {_num(latency.get('last'))}, p50 {_num(latency.get('p50'))}, "
        f"max {_num(latency.get('max'))} ticks"
    )


def _stalls_line(r: _Reader) -> str:
    counters = r.mapping("counters")
    if "counters" in r.missing:
        return "stalls     unknown"
    stalls = [what.format(n=counters[key]) for key, what in STALLS if counters.get(key)]
    return "stalls     " + ("; ".join(stalls) if stalls else "none")


def _timing_line(r: _Reader) -> str:
    overruns = r.need("counters", "overruns") if "counters" not in r.missing else None
    late = r.mapping("jitter_ms")
    line = f"timing     {_num(overruns)} overruns (ticks skipped)"
    if late.get("p99") is None:
        return line + "; wake-up lateness not measured yet"
    p99, worst = _num(late.get("p99"), " ms"), _num(late.get("max"), " ms")
    return line + f"; ticks woke late p99 {p99}, max {worst} (last 10 s)"


def _writes_line(r: _Reader) -> str:
    writes = r.mapping("write_period_error_ms")
    if writes.get("p99") is None:
        return "writes     period error not measured yet (needs writes on consecutive ticks)"
    return (
        f"writes     period error p99 {_num(writes.get('p99'), ' ms')}, max {_num(writes.get('max'), ' ms')} "
        f"(last 10 s); {_num(writes.get('off_5ms'))} of {_num(writes.get('periods'))} periods > 5 ms off"
    )


def _safety_line(r: _Reader) -> str:
    safety = r.mapping("safety")
    if "safety" in r.missing:
        return "safety     unknown"
    hits = [f"{kind} {n}" for kind, n in safety.items() if n]
    return "safety     " + (", ".join(hits) if hits else "no interventions")


def _teleop_line(r: _Reader) -> str:
    teleop = r.status.get("teleop")
    if not isinstance(teleop, Mapping):
        return ""
    session = teleop.get("session")
    holder = session.get("holder") if isinstance(session, Mapping) else None
    phase = teleop.get("phase")
    if not phase and not holder and r.status.get("source") != "teleop":
        return ""
    line = f"teleop     {phase or 'no phase'}; station {holder or 'none'}; {teleop.get('targets', 0)} targets"
    if teleop.get("out_of_order"):
        line += f" ({teleop['out_of_order']} out of order)"
    if teleop.get("late"):
        line += f", {teleop['late']} late for their tick"
    if teleop.get("intervention"):
        line += "; intervention"
    return line


def _recording_line(recording: Mapping[str, Any]) -> str:
    if not recording.get("active"):
        line = "recording  no episode running"
    else:
        line = f"recording  episode running: {recording.get('frames', 0)} frames"
        if recording.get("task"):
            line += f", task {recording['task']!r}"
    keys = ("episodes_ended", "episodes_discarded")
    done = [f"{recording[k]} {k.split('_', 1)[1]}" for k in keys if recording.get(k)]
    return line + (f"; episodes {', '.join(done)}" if done else "")
