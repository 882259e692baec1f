"""The report of ``bench field`` as the table it prints (``--json`` prints the report itself)."""

from __future__ import annotations

from typing import Any


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}"


def format_table(r: dict[str, Any]) -> str:
    """The report of :func:`~tools.bench.field.report.build_report` (with ``pty_workers``) as lines."""
    e = r["engine"]
    s, d, a, t = r["servos"], r["daemon"], r["agreement"], r["teleop"]
    sp, dw = s["period_error_ms"], d.get("flight_write_period_error_ms") or {}
    fl = r["floor"]
    lines = [
        f"bench field: {r['seconds']:g} s at {r['rate_hz']:g} Hz; {r['policy']} on {e.get('engine')} "
        f"{e.get('device')}/{e.get('precision')} {e.get('threads')} thread(s) on CPUs {e.get('cpus')}; "
        f"{len(r['cameras'])} camera(s) {r['cameras'][0]['width']}x{r['cameras'][0]['height']} at "
        f"{r['cameras'][0]['fps']:g} fps",
        f"CPU: {r['cpu']}, {r['cpus']} CPUs; flags: {' '.join(r['cpu_flags']) or 'none of avx2/avx512'}",
        f"scheduling: loop {r['scheduling']['control_loop']} (the arm process); "
        f"servo simulator {r['scheduling']['servo_simulator']}, pty workers {r.get('pty_workers', '-')}; "
        f"machine load average {r['loadavg'][0]} -> "
        f"{r['loadavg'][1]}",
        f"load: {r['load']['infers_per_s']:g} infers/s back to back (server infer p50 "
        f"{_ms((r['load']['server_infer_ms'] or {}).get('p50'))} ms); teleop station tracking; recording",
        "",
        f"{'goal-write period error (ms)':<36} {'p50':>7} {'p99':>7} {'max':>7} {'>5ms':>6} {'missing':>8}",
        f"{'at the servos (arrival stamps)':<36} {_ms(sp['p50']):>7} {_ms(sp['p99']):>7} {_ms(sp['max']):>7} "
        f"{s['off_5ms']:>6} {s['missing_periods']:>8}",
    ]
    if dw:
        lines.append(
            f"{'daemon, its own stamps (flight rec.)':<36} {_ms(dw['p50']):>7} {_ms(dw['p99']):>7} "
            f"{_ms(dw['max']):>7} {d['flight_off_5ms']:>6} {d['flight_ticks_without_write']:>8}"
        )
    sw = d["status_write_period_error_ms"]
    lines.append(
        f"{'daemon, control status (last 10 s)':<36} {_ms(sw['p50']):>7} {_ms(sw['p99']):>7} {_ms(sw['max']):>7} "
        f"{d['status_off_5ms_in_window']:>6} {'-':>8}"
    )
    if fl is not None:
        fs = fl["at_servos"]["period_error_ms"]
        lines.append(
            f"{'floor: pinned writer, at the servos':<36} {_ms(fs['p50']):>7} {_ms(fs['p99']):>7} "
            f"{_ms(fs['max']):>7} {fl['at_servos']['off_5ms']:>6} {fl['at_servos']['missing_periods']:>8}"
        )
        fw = fl["writer_own_period_error_ms"]
        lines.append(
            f"{'floor: the writer, its own stamps':<36} {_ms(fw['p50']):>7} {_ms(fw['p99']):>7} {_ms(fw['max']):>7}"
        )
    lines.append(
        "(>5ms: periods more than 5 ms off over the run; missing: periods without a goal write (the daemon: "
        "its ticks that wrote nothing); the floor ran "
        f"{fl['seconds'] if fl else 0:g} s beside the daemon)"
    )
    j = d["status_jitter_ms"]
    lines += [
        f"jitter (tick wake lateness, status last 10 s): p50 {_ms(j['p50'])} p99 {_ms(j['p99'])} "
        f"max {_ms(j['max'])} ms; "
        f"overruns {d['overruns']}; {s['writes']} writes at the servos for {d['ticks']} ticks",
        f"agreement at p99: |servos - daemon| {_ms(a.get('p99_difference_ms'))} ms over the run, "
        f"{_ms(a.get('p99_difference_last_10s_ms'))} ms over status' last 10 s; arrival - loop stamp "
        f"p50 {_ms((a.get('arrival_minus_loop_stamp_ms') or {}).get('p50'))} ms",
        f"teleop: target sent -> servo write p50 {_ms(t['send_to_write_ms']['p50'])} p99 "
        f"{_ms(t['send_to_write_ms']['p99'])} ms (target <= {t['target_p99_ms']:g}: "
        f"{'met' if t['target_met'] else 'NOT met'}); leader move -> write p50 {_ms(t['move_to_write_ms']['p50'])} "
        f"p99 {_ms(t['move_to_write_ms']['p99'])} ms; {t['measured']} of {t['moves']} moves seen",
    ]
    worst = r.get("worst_writes") or []
    if worst:
        steal = r.get("steal") or {}
        lines.append(
            "worst periods at the servos (s into the run: error ms; the loop woke late / wrote after its "
            "deadline / the bytes reached the servos after that, ms; hypervisor steal on the control CPU "
            "around it, ms): "
            + "; ".join(
                f"{w['at_s']:.1f}: {w['period_error_ms']:+.2f} ({_ms(w.get('loop_woke_late_ms'))} / "
                f"{_ms(w.get('loop_write_after_deadline_ms'))} / {_ms(w.get('arrived_after_loop_stamp_ms'))}; "
                f"steal {_ms(w.get('steal_ms_around'))})"
                for w in worst
            )
            + f"; steal over the run per CPU: {steal.get('per_cpu_ms')} ms"
        )
    for line in r["daemon_realtime_threads"]:
        lines.append(f"real-time threads of the daemon: {line}")
    estop = r["estop_at_end"]
    lines.append(
        f"mode at the end: {r['mode_at_end']}"
        + (f"; E-STOP latched: {estop['reason']}" if estop.get("latched") else "")
    )
    rec = r["recording"]
    cams = ", ".join(
        f"{name.rsplit('.', 1)[-1]} {c['encoder_drops']} dropped, {c['stream_frames_received']}/"
        f"{c['stream_frames_expected']} frames received"
        for name, c in rec["per_camera"].items()
    )
    check = rec["dataset_check"]
    lines.append(
        f"recording ({rec['codec']}"
        + (f", every encoder slowed by {r['encoder_delay_ms']:g} ms a frame" if r.get("encoder_delay_ms") else "")
        + f"): {rec['frames_written']} frames written; {cams}; episode drop rate "
        f"{100 * (rec['episode_drop_rate'] or 0):.1f} %, {rec['episodes_over_drop_rate']} episode(s) over "
        "recording.max_drop_rate; dataset check: "
        + ("OK" if check["ok"] else f"{len(check['problems'])} problems")
        + f" ({check['episodes']} episode(s), {check['frames']} frames)"
    )
    k = r.get("kill")
    if k is not None:
        first = k.get("first")
        text = f"kill ({r['kill_case']} driving, mode {k['mode_before']}): {k['verdict']}"
        if not k["moving_before"]:
            text = f"kill (the arm was NOT moving: mode {k['mode_before']}): {k['verdict']}"
        if first:
            text += (
                f"; first write {first['after_kill_ms']:g} ms after the kill, "
                f"{'the hold goal' if first['is_hold'] else 'not the last goal'}"
                f"{', at the next tick' if first['at_next_tick'] else ', not at the next tick'}"
            )
        lines.append(text)
        if k["daemon_children_alive_after"]:
            lines.append(f"  still running {k['watched_s']:g} s after: {', '.join(k['daemon_children_alive_after'])}")
    return "\n".join(lines)
