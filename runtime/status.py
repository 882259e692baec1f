"""What ``lerobot-runtime status`` reports: the running daemon, asked over its own protocol.

One ``hello`` and one ``stats`` request on the daemon's ipc endpoint (local, so no CURVE keys are
needed; the socket is group-writable for the service's group) give the bundle, engine, device,
precision, threads, the CPUs inference really ran on, clients, requests and errors (the daemon's own
control loop's part named), latency percentiles, queue, arm health, temperatures and e-stop.
"""

from __future__ import annotations

from typing import Any

from runtime.config import DaemonConfig
from runtime.errors import ConfigError
from runtime.protocol.messages import PolicyInfo, StatsSnapshot
from runtime.server.stats import counts_text


def status_endpoint(config: DaemonConfig) -> str:
    """The endpoint to ask: the first ipc one (no keys needed), else a loopback tcp one."""
    from runtime.server.endpoints import is_local_endpoint, resolve_endpoint

    for ep in config.server.endpoints:
        if ep.startswith("ipc://"):
            return resolve_endpoint(ep)
    for ep in config.server.endpoints:
        if is_local_endpoint(ep) and not config.server.curve.enabled:
            return ep
    raise ConfigError(
        "status: the config has no ipc endpoint (nor a loopback tcp one without CURVE) to ask; pass --connect"
    )


def gather(info: PolicyInfo, stats: StatsSnapshot) -> dict[str, Any]:
    engine = dict(stats.engine or info.engine)
    return {
        "policy": info.policy_name,
        # a daemon whose loop asks a policy on another machine names it; its bundle is that machine's
        "remote": engine.get("endpoint") if engine.get("where") == "remote" else None,
        "bundle": engine.get("bundle"),
        "program": engine.get("program"),
        "engine": engine.get("engine"),
        "device": engine.get("device"),
        "precision": engine.get("precision"),
        "threads": engine.get("threads"),
        "cpus_allowed": engine.get("cpus"),
        "cpus_observed": {str(k): v for k, v in sorted(stats.inference_cpus.items())},
        "uptime_s": stats.uptime_s,
        "clients": stats.clients,
        "requests": dict(stats.requests),
        "errors": dict(stats.errors),
        # the part of requests and errors that came from the daemon's own control loop
        "local_requests": dict(stats.local_requests),
        "local_errors": dict(stats.local_errors),
        "queue": {
            "depth": stats.queue_depth,
            "capacity": stats.queue_capacity,
            "depth_max": stats.queue_depth_max,
            "in_flight": stats.in_flight,
        },
        "latency_ms": {k: v.to_wire() for k, v in stats.latency_ms.items()},
        "arm": dict(stats.arm) if stats.arm is not None else None,
        # a staged load's parity gate: its replays passed of all; nothing is served before all passed
        "gate": dict(stats.verification.get("gate") or {}) or None,
        "versions": dict(info.versions),
    }


def gate_lines(gate: dict[str, Any] | None) -> list[str]:
    """The parity gate's line while the rest of a staged gate runs or once it failed (none once passed)."""
    if not gate:
        return []
    if gate.get("failure"):
        return [f"gate       FAILED, serving nothing until the policy is loaded again: {gate['failure']}"]
    if not gate.get("done"):
        passed, runs = gate.get("passed"), gate.get("runs")
        return [f"gate       {passed} of {runs} parity replays passed; nothing is served before all"]
    return [f"gate       passed, all {gate.get('runs')} parity replays"]


def format_status(s: dict[str, Any]) -> str:
    served = f" served at {s['remote']}, from its" if s.get("remote") else " from"
    lines = [
        f"policy     {s['policy']}{served} {s['bundle']} ({s['program']})",
        f"engine     {s['engine']} on {s['device']}/{s['precision']}, {s['threads']} threads, "
        f"CPUs allowed {s['cpus_allowed']}, inference ran on "
        + (", ".join(f"CPU {c} ({n}x)" for c, n in s["cpus_observed"].items()) or "no CPU yet (no inference)"),
        *gate_lines(s.get("gate")),
        f"uptime     {s['uptime_s']:.0f} s; clients in the last minute: {s['clients']}",
        "requests   " + counts_text(s["requests"], s.get("local_requests"))
        + "; errors " + counts_text(s["errors"], s.get("local_errors")),
        f"queue      {s['queue']['depth']}/{s['queue']['capacity']} (max {s['queue']['depth_max']}), "
        f"in flight {s['queue']['in_flight']}",
    ]
    for stage, p in s["latency_ms"].items():
        lines.append(
            f"latency    {stage:<6} p50 {p['p50']} p90 {p['p90']} p99 {p['p99']} max {p['max']} ms (last {p['count']})"
        )
    arm = s["arm"]
    if arm is None:
        lines.append("arm        none")
    else:
        health = "ok" if arm.get("healthy") else f"FAILING: {arm.get('last_error')}"
        estop = f"ENGAGED: {arm.get('estop_reason') or 'no reason given'}" if arm.get("estop") else "released"
        temps = ", ".join(f"{j} {t}" for j, t in (arm.get("temperature_c") or {}).items()) or "unknown"
        lines.append(f"arm        {arm.get('kind')}: {health}; e-stop {estop}")
        lines.append(f"temps °C   {temps}")
    return "\n".join(lines)
