"""``lerobot-runtime replay FILE``: read a flight recording, summarise it, draw it.

The drawing (optional ``plot`` extra, matplotlib) has one panel per joint: present position, the goal
written and the action requested before the safety envelope, with envelope interventions marked and
mode changes drawn as labelled vertical lines; and a timing panel below them: how late each tick
woke, and the write period error (time since the previous tick's completed write minus the period,
what the servos see). Recordings made before write times were recorded have no timing of writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from runtime.control.recorder import load_flight
from runtime.control.safety import KINDS
from runtime.control.writetime import summarize_errors
from runtime.errors import MissingDependencyError


def mode_changes(t: np.ndarray, mode: np.ndarray, names: list[str]) -> list[tuple[float, str]]:
    if len(mode) == 0:
        return []
    idx = [0, *list(np.flatnonzero(np.diff(mode)) + 1)]
    return [(float(t[i] - t[0]), names[int(mode[i])]) for i in idx]


def summarize(path: str | Path) -> dict[str, Any]:
    meta, a = load_flight(path)
    t = a["t"]
    joints: list[str] = meta["joints"]
    late = np.abs(a["late_ms"])
    clamps = a["clamps"]
    per_joint = {}
    for j, name in enumerate(joints):
        counts = {kind: int(((clamps[:, j] & bit) != 0).sum()) for bit, kind in KINDS.items()}
        err = np.abs(a["goal"][:, j] - a["present"][:, j])
        per_joint[name] = {
            "interventions": {k: v for k, v in counts.items() if v},
            "max_goal_minus_present": float(np.nanmax(err)) if np.isfinite(err).any() else None,
            "range": [float(np.nanmin(a["present"][:, j])), float(np.nanmax(a["present"][:, j]))]
            if np.isfinite(a["present"][:, j]).any()
            else None,
        }
    lat = a["latency_ticks"][np.isfinite(a["latency_ticks"])]
    return {
        "file": str(path),
        "reason": meta.get("reason", ""),
        "rate_hz": meta.get("rate_hz"),
        "ticks": len(t),
        "seconds": float(t[-1] - t[0]) if len(t) > 1 else 0.0,
        "modes": [{"at_s": round(at, 3), "mode": m} for at, m in mode_changes(t, a["mode"], meta["modes"])],
        "jitter_ms": {
            "p50": float(np.percentile(late, 50)) if len(late) else None,
            "p99": float(np.percentile(late, 99)) if len(late) else None,
            "max": float(late.max()) if len(late) else None,
        },
        "write_period_error_ms": summarize_errors(a["write_err_ms"]) if "write_err_ms" in a else None,
        "ticks_with_goal": int(np.isfinite(a["goal"]).all(axis=1).sum()),
        "inference_latency_ticks_max": float(lat.max()) if len(lat) else None,
        "joints": per_joint,
    }


def format_summary(s: dict[str, Any]) -> str:
    lines = [
        f"{s['file']}: {s['ticks']} ticks over {s['seconds']:.2f} s at {s['rate_hz']} Hz",
        f"written because: {s['reason']}",
        "modes: " + ", ".join(f"{m['mode']} at {m['at_s']:.2f} s" for m in s["modes"]),
        "tick lateness ms: p50 {p50}, p99 {p99}, max {max}".format(
            **{k: "-" if v is None else f"{v:.3f}" for k, v in s["jitter_ms"].items()}
        ),
        _write_line(s["write_period_error_ms"]),
        f"ticks that wrote a goal: {s['ticks_with_goal']}; "
        f"inference latency max {s['inference_latency_ticks_max']} ticks",
    ]
    for name, j in s["joints"].items():
        lo_hi = "-" if j["range"] is None else f"{j['range'][0]:.1f}..{j['range'][1]:.1f}"
        clamps = ", ".join(f"{k} {v}" for k, v in j["interventions"].items()) or "none"
        lines.append(f"  {name:<14} present {lo_hi:>14}   safety interventions: {clamps}")
    return "\n".join(lines)


def _write_line(w: dict[str, Any] | None) -> str:
    if w is None:
        return "write period error ms: not recorded"
    figures = {k: "-" if w[k] is None else f"{w[k]:.3f}" for k in ("p50", "p99", "max")}
    return (
        "write period error ms: p50 {p50}, p99 {p99}, max {max}".format(**figures)
        + f" ({w['periods']} periods, {w['off_5ms']} more than 5 ms off)"
    )


def draw(path: str | Path, out: str | Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MissingDependencyError(f"drawing needs matplotlib: pip install 'lerobot-runtime[plot]' ({e})") from e
    meta, a = load_flight(path)
    joints: list[str] = meta["joints"]
    t = a["t"] - a["t"][0] if len(a["t"]) else a["t"]
    panels = len(joints) + 1  # and the timing panel
    fig, axes = plt.subplots(panels, 1, figsize=(11, 2.0 * panels), sharex=True, squeeze=False)
    changes = mode_changes(a["t"], a["mode"], meta["modes"])
    for j, (ax, name) in enumerate(zip(axes[:-1, 0], joints, strict=True)):
        ax.plot(t, a["present"][:, j], label="present", color="tab:blue", lw=1.2)
        ax.plot(t, a["goal"][:, j], label="goal written", color="tab:orange", lw=1.0, ls="--")
        ax.plot(t, a["requested"][:, j], label="requested", color="tab:gray", lw=0.8, ls=":")
        hit = a["clamps"][:, j] != 0
        if hit.any():
            ax.plot(t[hit], a["goal"][hit, j], "x", color="tab:red", ms=4, label="safety clamp")
        for at, mode in changes:
            ax.axvline(at, color="k", lw=0.5, alpha=0.4)
            if j == 0:
                ax.annotate(mode, (at, 1.0), xycoords=("data", "axes fraction"), fontsize=7, va="bottom")
        ax.set_ylabel(name, fontsize=8)
        ax.grid(alpha=0.3)
    timing = axes[-1, 0]
    timing.plot(t, a["late_ms"], label="tick woke late", color="tab:blue", lw=0.8)
    if "write_err_ms" in a:
        timing.plot(t, a["write_err_ms"], label="write period error", color="tab:orange", lw=0.8)
    for at, _ in changes:
        timing.axvline(at, color="k", lw=0.5, alpha=0.4)
    timing.axhline(0.0, color="k", lw=0.5)
    timing.set_ylabel("ms", fontsize=8)
    timing.grid(alpha=0.3)
    timing.legend(loc="upper right", fontsize=7, ncol=2)
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("seconds")
    fig.suptitle(f"{Path(path).name}: {meta.get('reason', '')}", fontsize=9)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
