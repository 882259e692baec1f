"""Mutation testing of the safety- and operations-critical modules (``make mutation``).

Each scope mutates a few modules with mutmut and runs only the tests that cover them, in a scratch
copy of the working tree under ``.mutation/<scope>/`` (so mutmut's ``mutants/`` folder never lands
in the checkout). Too slow for CI on two cores: run it by hand after changing one of these modules
or its tests. Each run is recorded in the ledger (``docs/mutation-ledger.json``: its counts and the
mutants that survived; see :mod:`tools.mutation_ledger`), which is rendered again into
``docs/mutation-ledger.md`` and the score table of ``docs/testing.md``.

    python tools/mutation.py                 # every scope
    python tools/mutation.py parity codec    # some scopes
    python tools/mutation.py --list          # what each scope mutates and runs
    python tools/mutation.py --ledger        # render the ledger again (after writing a verdict in it)

mutmut forks one child per mutant from a fork server (``process_isolation = "forkserver"``): forking
the process that already ran OpenVINO and the simulators' threads crashes the children.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

try:
    from tools import mutation_ledger
except ModuleNotFoundError:  # run as a script (python tools/mutation.py): the checkout is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools import mutation_ledger

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"


@dataclass(frozen=True)
class Scope:
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    # mutmut mutant-name globs (``runtime.server.server.xǁPolicyServerǁ_bind*``, ``*.x_name*`` for a
    # module-level function): only the functions named here are mutated and scored, for a scope that
    # is about a few functions of a large module. Empty: every function of ``modules``.
    functions: tuple[str, ...] = ()


SCOPES: dict[str, Scope] = {
    "parity": Scope(("runtime/engine/parity.py",), ("tests/engine/test_parity.py",)),
    "validation": Scope(("runtime/engine/validate.py",), ("tests/engine/test_validate.py",)),
    # OpenVINO's C library found in this process's memory map (a path with spaces too), the environment
    # or the package, and its last error text read and freed; a memory map and a library the test makes.
    "engine-ovlib": Scope(("runtime/engine/ovlib.py",), ("tests/engine/test_ovlib.py",)),
    # Inference's CPU set and its refusal, pinning, every thread moved while an engine loads and given
    # its set back, and what procfs says a thread ran on (a procfs tree the test writes).
    "engine-affinity": Scope(("runtime/engine/affinity.py",), ("tests/engine/test_affinity.py",)),
    # The serving canary on a stand-in engine and a clock the test moves: when a check is due (idle, or
    # a whole period late), what each check records, a wrong answer or an exception failing it for good.
    "engine-canary": Scope(("runtime/engine/canary.py",), ("tests/engine/test_canary.py",)),
    # The engine's small rules: precision names and order and the execution graph read (stand-in compiled
    # models), every [engine] refusal, the device choice and its reasons, output poisoning.
    "engine-rules": Scope(
        tuple(f"runtime/engine/{m}.py" for m in ("precision", "config", "devices", "poison")),
        (
            "tests/engine/test_precision_rules.py",
            "tests/engine/test_config.py",
            "tests/engine/test_devices.py",
            "tests/engine/test_poison.py",
        ),
    ),
    # Loading on a stand-in bundle and stand-in engines (no export, no compile): the engine chosen and
    # why, what each is handed, the OpenVINO version check, the parity gate and its override, warm-up,
    # the report's timings on a clock the test moves.
    "engine-loader": Scope(("runtime/engine/loader.py",), ("tests/engine/test_loader.py",)),
    "codec": Scope(
        ("runtime/protocol/codec.py", "runtime/protocol/arrays.py"),
        (
            "tests/server/test_codec.py",
            "tests/server/test_codec_replies.py",
            "tests/server/test_codec_requests.py",
            "tests/server/test_arrays.py",
        ),
    ),
    "security": Scope(
        ("runtime/server/security.py", "runtime/server/endpoints.py"),
        ("tests/server/test_security.py", "tests/server/test_security_restart.py"),
    ),
    "lifecycle": Scope(
        ("runtime/sdnotify.py", "runtime/daemon.py"),
        ("tests/server/test_sdnotify.py", "tests/server/test_daemon_lifecycle.py", "tests/server/test_daemon_ticks.py"),
    ),
    "driver-protocol": Scope(
        ("drivers/feetech/protocol.py", "drivers/dynamixel/protocol.py", "drivers/registers.py"),
        ("tests/drivers/test_protocol.py",),
    ),
    "calibration": Scope(("drivers/calibration.py",), ("tests/drivers/test_calibration.py",)),
    "driver-bus": Scope(("drivers/bus.py",), ("tests/drivers",)),
    "safety": Scope(("runtime/control/safety.py",), ("tests/control/test_safety.py", "tests/control/test_parts.py")),
    # A bundle whose files were changed after export must not load: the sha256 checks of what is read.
    "bundle-integrity": Scope(("runtime/bundle/bundle.py",), ("tests/engine/test_bundle_integrity.py",)),
    # A .pte read without torch: methods, delegates and payloads (inline or in a segment); a truncated
    # or altered file, an index out of range, a segment without the extended header refused naming the file.
    "bundle-pte": Scope(("runtime/bundle/pte.py",), ("tests/bundle/test_pte.py",)),
    # manifest.json: every field's refusal naming the file and the field, defaults, what is written
    # back. Of tests/engine/test_manifest.py only the tests without the demo bundle's export.
    "bundle-manifest": Scope(
        ("runtime/bundle/manifest.py",),
        (
            "tests/bundle/test_manifest.py",
            "tests/engine/test_manifest.py::test_good_manifest_round_trips",
            "tests/engine/test_manifest.py::test_bad_field_is_named",
            "tests/engine/test_manifest.py::test_missing_and_unreadable_manifest",
        ),
    ),
    # The bundle's smaller parts: the task tokenizer (a word-level definition made in the test), install
    # (hand-written bundles, a stand-in parity gate), RTC's prefix weights worked by hand.
    "bundle-parts": Scope(
        ("runtime/bundle/tokenizer.py", "runtime/engine/install.py", "runtime/bundle/rtc.py"),
        ("tests/bundle/test_tokenizer.py", "tests/engine/test_install.py", "tests/bundle/test_rtc.py"),
    ),
    # The engine seam on a stand-in engine: inputs validated and ordered before the program runs, the
    # engine's info on the wire, a with block closing it.
    "engine-base": Scope(("runtime/engine/base.py",), ("tests/engine/test_base.py",)),
    # The built-in bundles' store: where it is, when a stored bundle is current, what is exported or built
    # (two stand-in processes) when it is not, and the new directory replacing the old one.
    "bundle-store": Scope(("runtime/export/demo.py",), ("tests/export/test_demo.py",)),
    # The checks on a freshly lowered program: an output that is an input passed through, a non-default
    # dim order at a partition edge, int64 reductions inside a delegate (a lowered graph made in the test
    # and a real OpenVINO blob; that those shapes really come out wrong is in the export tests of
    # tests/engine/test_lowering_checks.py, about 11 s per mutant, too slow to run here).
    "bundle-lowering-checks": Scope(
        ("runtime/export/lowering_checks.py",), ("tests/export/test_lowering_findings.py",)
    ),
    # What lowering tells OpenVINO: CPU programs compiled at f32 without snippets (a stand-in Core, a real
    # compile, a gated MLP imported on one thread), and 0-d bf16 constants made from their value.
    "bundle-lowering": Scope(
        ("runtime/export/compile_precision.py", "runtime/export/scalar_constants.py"),
        (
            "tests/export/test_compile_precision.py",
            "tests/export/test_scalar_constants.py",
            "tests/engine/test_scalar_constants.py",
        ),
    ),
    # INT8's weight plumbing: each use of a shared weight named apart (aliases), the quantised weights
    # folded into one INT8 constant per weight and scale, equal constants merged (hand-made graphs, NNCF).
    "bundle-weights": Scope(
        ("runtime/export/shared_weights.py", "runtime/export/weight_folding.py"),
        (
            # on graphs made by hand (the NNCF and export tests of these modules run in the suite only)
            *(
                f"tests/export/test_weight_folding.py::{t}"
                for t in (
                    "test_folded_layers_compute_the_same_bit_for_bit_and_read_int8",
                    "test_aliases_with_equal_scales_are_quantised_once",
                    "test_one_storage_with_different_scales_gets_a_constant_per_scale",
                    "test_activations_and_asymmetric_weights_are_left_as_they_are",
                    "test_an_asymmetric_pair_does_not_stop_the_pairs_after_it",
                    "test_a_weight_still_read_by_a_pair_left_alone_stays",
                    "test_the_int8_constants_are_named_after_the_use_that_made_them_one_per_scale",
                    "test_a_weight_of_a_submodule_and_a_per_tensor_pair",
                    "test_pairs_unlike_nncfs_weight_pairs_are_left_alone",
                )
            ),
            *(
                f"tests/export/test_shared_weights.py::{t}"
                for t in (
                    "test_each_use_gets_a_name_of_its_own_reading_the_same_storage",
                    "test_copies_that_stayed_equal_are_merged_back_and_the_module_computes_the_same",
                    "test_each_further_use_is_named_after_the_weight_and_registered_as_the_weight_was",
                    "test_equal_constants_are_merged_and_the_merged_ones_leave_the_module",
                )
            ),
        ),
    ),
    # What the server's sockets refuse before any of its code runs: ZMQ_MAXMSGSIZE, the high-water mark,
    # the size limit derived from the policy, and the config that sets it.
    "server-limits": Scope(
        ("runtime/server/server.py", "runtime/server/config.py"),
        ("tests/server/test_socket_limits.py",),
        (
            "runtime.server.server.x_auto_max_message_bytes*",
            "runtime.server.server.xǁPolicyServerǁ_bind*",
            "runtime.server.server.xǁPolicyServerǁ_send*",
            "runtime.server.server.xǁPolicyServerǁ_receive*",
            "runtime.server.config.xǁServerConfigǁ__post_init__*",
        ),
    ),
    # A caller gets the reply to its own request, never another's.
    "client": Scope(("runtime/client.py",), ("tests/test_client_replies.py",)),
    # The daemon <-> arm process link: datagrams, drops counted, end-of-file on the peer's death.
    # The arm process's garbage collection: how often young and full collections come at a rate, the
    # counts and times it records, taking over (freeze, automatic collection off) and handing back.
    "arm-collector": Scope(("runtime/arm/collector.py",), ("tests/arm/test_collector.py",)),
    "arm-wire": Scope(("runtime/arm/wire.py",), ("tests/arm/test_wire.py", "tests/arm/test_wire_link.py")),
    # What crosses that link: each kind of message, its layout on the wire, every refusal by name, the
    # version checked first, nothing but a LinkProtocolError out of decoding whatever came.
    "arm-codec": Scope(
        ("runtime/arm/codec.py", "runtime/arm/messages.py"),
        ("tests/arm/test_codec.py", "tests/arm/test_messages.py"),
    ),
    # E-stop latches and the command queue. tests/control/test_controller.py also reaches them, but
    # its fixture exports the demo bundle (about 40 s) in every mutant's run: left out.
    "mailbox": Scope(
        ("runtime/control/mailbox.py", "runtime/control/latch.py"),
        ("tests/control/test_mailbox.py", "tests/control/test_latches.py"),
    ),
    # The loop's way to the policy: joints plus the newest frames, validated; stale or untrusted blocks.
    "feed": Scope(("runtime/control/feed.py",), ("tests/arm_control/test_feed.py",)),
    # Backpressure: the bound, latest observation wins, the control loop's jobs first, close and cancel.
    "queue": Scope(("runtime/server/queue.py",), ("tests/server/test_queue.py",)),
    # The mode machine: start, stop, hold, e-stop latch and release, deadman and stall actions, rest
    # inside the envelope, hand-over, chunks merged or refused. Its tests make their manifest in code
    # (tests/control/test_controller.py once took the demo bundle's export, about 40 s a run).
    "controller": Scope(
        ("runtime/control/controller.py",),
        (
            "tests/control/test_controller.py",
            "tests/control/test_controller_modes.py",
            "tests/control/test_controller_pure.py",
        ),
    ),
    # The runner: decide, write, read, ask in that order; write-time stamps; what each tick publishes
    # and records; the shutdown sequence; a bug in the tick; status. On a stand-in bus and a clock the
    # test moves (tests/control/test_loop.py drives the simulated servos with the demo bundle: too slow).
    "loop": Scope(("runtime/control/loop.py",), ("tests/control/test_loop_runner.py",)),
    # The daemon <-> arm process link above the wire: each message either side handles, the policy
    # across the link (asks, chunks, the gate, silence as a loss), e-stop numbering, checks, requests,
    # flight recordings, the arm process's death, status. A socketpair Link, no process: starting,
    # the hand-shake and stopping the arm process are left to tests/arm/test_faults.py.
    "arm-link": Scope(
        ("runtime/arm_control/link.py", "runtime/arm/process.py"),
        ("tests/arm_control/test_link.py", "tests/arm/test_arm_side.py"),
        (
            "runtime.arm_control.link.xǁTeleopInboxǁ*",
            "runtime.arm_control.link.xǁ_FlightRecorderǁ*",
            *(
                f"runtime.arm_control.link.xǁArmLinkǁ{m}*"
                for m in (
                    "__init__",
                    "send",
                    "_run",
                    "_send_gate",
                    "_take",
                    "_refused",
                    "_dispatch",
                    "_died",
                    "snapshot",
                    "stalled_for",
                    "request",
                    "check",
                    "dump",
                    "status",
                )
            ),
            "runtime.arm_control.link.x__exit_words*",
            "runtime.arm.process.xǁLinkPolicyǁ*",
            "runtime.arm.process.xǁ_EpisodeTapǁ*",
            "runtime.arm.process.xǁArmSideǁ*",
            "runtime.arm.process.x__dump*",
            "runtime.arm.process.x__wait*",
            "runtime.arm.process.x__receive_init*",
        ),
    ),
    # The arm process's entry and body: its memory locked (or why not, and the way out), its one argument,
    # run() in the test's process on simulated servos with the test as the daemon (the signals, its CPU,
    # ready, a shutdown, each refusal to start). The real process under a daemon: tests/arm/test_faults.py.
    "arm-process-entry": Scope(
        ("runtime/arm/process.py",),
        ("tests/arm/test_arm_side.py", "tests/arm/test_arm_process_run.py"),
        ("runtime.arm.process.x__mlockall*", "runtime.arm.process.x_main*", "runtime.arm.process.x_run*"),
    ),
    # The vendors' buses and control tables: each register's address and size as the datasheets give
    # them, the Feetech Lock around EEPROM writes, the Dynamixel CRC-error status and alert read-back.
    "driver-vendors": Scope(
        (
            "drivers/feetech/bus.py",
            "drivers/dynamixel/bus.py",
            "drivers/feetech/tables.py",
            "drivers/dynamixel/tables.py",
            "drivers/vendors.py",
        ),
        (
            "tests/drivers/test_vendor_buses.py",
            "tests/drivers/test_control_tables.py",
            "tests/drivers/test_bus_sim.py",
            "tests/drivers/test_bus_contract.py",
            "tests/drivers/test_faults.py",
        ),
    ),
    # The serial port's opening and its errors, the codec's protocol, the driver errors' fields and words.
    "driver-port": Scope(
        ("drivers/port.py", "drivers/packets.py", "drivers/errors.py"),
        (
            "tests/drivers/test_port.py",
            "tests/drivers/test_errors.py",
            "tests/drivers/test_bus_contract.py",
            "tests/drivers/test_bus_sim.py",
            "tests/drivers/test_faults.py",
            "tests/drivers/test_protocol.py",
        ),
    ),
    # The [arm] table, the TOML-to-dataclass checks every config goes through, and opening an arm from it.
    "driver-config": Scope(
        ("drivers/config.py", "drivers/configtools.py", "drivers/arm.py"),
        (
            "tests/drivers/test_arm_config.py",
            "tests/drivers/test_configtools.py",
            "tests/drivers/test_open_arm.py",
            "tests/drivers/test_calibration.py",
            "tests/drivers/test_cli.py",
        ),
    ),
    # The loop's small parts: the one-slot handoff, stall detection, the mode machine's values, the plan.
    "control-parts": Scope(
        tuple(f"runtime/control/{m}.py" for m in ("handoff", "stall", "mode", "plan")),
        (
            "tests/control/test_handoff.py",
            "tests/control/test_stall.py",
            "tests/control/test_mode.py",
            "tests/control/test_plan.py",
            "tests/control/test_plan_stall_state.py",
        ),
    ),
    # The action queue: chunks merged by tick, past actions dropped, latest/average/temporal ensemble,
    # the ring's bound, take and the leftover a real-time chunking request continues.
    "control-actions": Scope(
        ("runtime/control/actions.py",),
        (
            "tests/control/test_actions.py",
            "tests/control/test_parts.py::TestActionQueue",
            "tests/control/test_plan.py",
            "tests/control/test_plan_stall_state.py",
        ),
    ),
    # The loop's timing: drift-free deadlines and overruns, CPU pinning and SCHED_FIFO in words, each
    # write's stamp and period error.
    "control-timing": Scope(
        ("runtime/control/clock.py", "runtime/control/writetime.py"),
        ("tests/control/test_clock.py", "tests/control/test_write_clock.py"),
    ),
    # What the loop leaves behind: the flight recorder's rows and dump, replay's summary (not its
    # drawing: colours and line widths), the events deque, the snapshot's derived values.
    "control-records": Scope(
        tuple(f"runtime/control/{m}.py" for m in ("recorder", "replay", "events", "snapshot")),
        ("tests/control/test_recorder.py", "tests/control/test_replay.py", "tests/control/test_events_snapshot.py"),
        (
            "runtime.control.recorder.*",
            "runtime.control.events.*",
            "runtime.control.snapshot.*",
            "runtime.control.replay.x_mode_changes*",
            "runtime.control.replay.x_summarize*",
            "runtime.control.replay.x_format_summary*",
            "runtime.control.replay.x__write_line*",
        ),
    ),
    # Episodes recorded from the loop: requests carried out on the loop's thread, frames, cuts, status.
    "control-episodes": Scope(("runtime/arm_control/episodes.py",), ("tests/arm_control/test_episodes.py",)),
    # control.* requests: who may command, the refusals word for word, the task a start leaves, status.
    "control-handler": Scope(("runtime/arm_control/handler.py",), ("tests/arm_control/test_handler.py",)),
    # The [control] table: defaults, every refusal at its boundary, real-time chunking against the bundle.
    "control-config": Scope(("runtime/control/config.py",), ("tests/control/test_config.py",)),
    # The camera streams: inputs checked, parts checked and counted, the newest kept, staleness; stand-in
    # sockets, and one real ipc socket for the thread's start and stop.
    "control-streams": Scope(("runtime/arm_control/streams.py",), ("tests/arm_control/test_streams.py",)),
    # The protocol's messages and errors: every reply's wire map, each error code's class and the
    # builtin it is caught as, an error reply turned back into its exception, unexpected body keys refused.
    "protocol-messages": Scope(
        ("runtime/protocol/messages.py", "runtime/protocol/errors.py"),
        (
            "tests/protocol/test_messages.py",
            "tests/protocol/test_errors.py",
            "tests/server/test_codec.py",
            "tests/server/test_codec_replies.py",
            "tests/server/test_codec_requests.py",
        ),
    ),
    # The camera stream's parts and the teleop.* bodies: every refusal naming its field, both edges of
    # each bound.
    "protocol-stream": Scope(
        ("runtime/protocol/stream.py", "runtime/protocol/teleop.py"),
        (
            "tests/protocol/test_stream.py",
            "tests/protocol/test_teleop.py",
            "tests/control/test_parts.py::TestStreamFormat",
            "tests/control/test_teleop_parts.py",
            "tests/server/test_codec_requests.py",
        ),
    ),
    # Frames of history per client (filled on the first frame, a reset or a gap; the bound on clients),
    # the program's inputs in manifest order, sampling noise from one seeded generator.
    "server-history": Scope(("runtime/server/history.py",), ("tests/server/test_history.py",)),
    # The inference worker on a stand-in engine: jobs in order, replies and their timing, each error
    # code, the control loop's callback, engine swaps, the canary between jobs, heartbeats, stopping.
    "server-worker": Scope(("runtime/server/worker.py",), ("tests/server/test_worker.py",)),
    # Request counters and latency percentiles, the stats log line and its canary part.
    "server-stats": Scope(("runtime/server/stats.py",), ("tests/server/test_stats.py",)),
    # One daemon per endpoint set: the ipc lock files, the refusal naming the holder, the tcp listener.
    "server-instance": Scope(("runtime/server/instance.py",), ("tests/server/test_instance_lock.py",)),
    # motors scan/read/sim and bench bus: ids, defaults, what each prints and hands the bus; the bench's
    # figures on a clock the test sets.
    "driver-cli": Scope(
        ("drivers/cli.py", "drivers/bench.py"),
        ("tests/drivers/test_cli.py", "tests/drivers/test_cli_commands.py"),
    ),
    # The recording's data rules: every [recording] refusal at its bound, the features' checks and the
    # info.json features they make, LeRobot's path templates and file roll-over, per-episode and
    # combined statistics worked by hand.
    "recording-data": Scope(
        tuple(f"runtime/recording/{m}.py" for m in ("config", "layout", "features", "stats")),
        (
            "tests/recording/test_config.py",
            "tests/recording/test_features.py",
            "tests/recording/test_layout.py",
            "tests/recording/test_stats.py",
        ),
    ),
    # A frame's way to the writer: each field checked and named, nothing copied when one is refused, the
    # camera frames' shared-memory ring (its views, the free list, a segment removed once).
    "recording-frames": Scope(
        ("runtime/recording/frames.py", "runtime/recording/shm_ring.py"),
        ("tests/recording/test_frames.py", "tests/recording/test_shm_ring.py"),
    ),
    # The [teleop] table's refusals at their bounds, the target slot (out of order, the deadman's edge)
    # and both hand-overs step by step, one session at a time and its loss on a clock the test moves, the
    # station's raw keys and status line (a pty), the daemon's own leader read on a stand-in loop.
    "teleop-parts": Scope(
        tuple(f"runtime/teleop/{m}.py" for m in ("config", "target", "session", "terminal", "local")),
        (
            "tests/teleop/test_config.py",
            "tests/control/test_target.py",
            "tests/arm_control/test_teleop_session.py",
            "tests/teleop/test_terminal.py",
            "tests/arm_control/test_local_leader.py",
            "tests/control/test_teleop_parts.py",
        ),
    ),
    # The operator's side and the daemon's teleop.* requests: the station's keys, targets, status and
    # phase lock on a stand-in client and leader; a leader arm's order and reads on a stand-in bus; every
    # teleop.* request and refusal word for word on a stand-in loop and a clock the test moves.
    "teleop-station": Scope(
        tuple(f"runtime/teleop/{m}.py" for m in ("station", "leader", "handler")),
        (
            "tests/teleop/test_station.py",
            "tests/teleop/test_leader.py",
            "tests/arm_control/test_teleop.py",
            "tests/control/test_teleop_parts.py",
        ),
    ),
    # The daemon's configuration: [daemon] defaults and each refusal at its bound, the state directory,
    # relative paths in a file resolved against it, the data root, installed versions, the exceptions.
    "daemon-config": Scope(
        tuple(f"runtime/{m}.py" for m in ("config", "paths", "versions", "errors")),
        ("tests/test_configs.py", "tests/test_config.py", "tests/test_paths.py", "tests/test_errors.py"),
    ),
    # The daemon's health figures: heartbeats and stalls on a clock the test moves, `status`'s report,
    # the Prometheus collector's families, scheduling classes put back, the journald log format.
    "daemon-health": Scope(
        tuple(f"runtime/{m}.py" for m in ("liveness", "status", "metrics", "scheduling", "log")),
        (
            "tests/daemon/test_liveness.py::test_heartbeat_reports_how_long_and_what",
            "tests/daemon/test_liveness_registry.py",
            "tests/daemon/test_status_report.py",
            "tests/daemon/test_metrics.py",
            "tests/test_scheduling.py",
            "tests/test_log.py",
        ),
    ),
    # The arm as the daemon holds it (health, e-stop, status, waiting for a late arm, closing) on a
    # stand-in bus and clock, and what a SIGHUP may change (the reload plan, the bundle's identity).
    "daemon-arm-monitor": Scope(
        ("runtime/arm_monitor.py", "runtime/reload.py"),
        ("tests/test_arm_monitor.py", "tests/daemon/test_reload_plan.py"),
    ),
    # The server's small modules: a task checked and its tokens cached (a word-level tokenizer made in
    # the test), real-time chunking's prefix fields refused by name and turned into the program's
    # arrays, the synthetic OpenVINO policy and its numpy reference (a tiny one compiled in the test).
    # Of test_tasks.py and test_rtc.py only what needs no demo engine nor LeRobot.
    "server-small": Scope(
        ("runtime/server/tasks.py", "runtime/server/rtc.py", "runtime/server/synthetic.py"),
        (
            "tests/server/test_synthetic.py",
            *(
                f"tests/server/test_tasks.py::{t}"
                for t in (
                    "test_the_codec_carries_a_task_and_none_when_absent",
                    "test_a_task_that_is_not_a_string_is_refused_by_field",
                    "test_a_task_that_is_not_utf8_is_refused_naming_the_field",
                    "test_task_checks_name_what_was_wrong",
                    "test_hello_from_a_server_before_tasks_says_no_task",
                    "test_task_refusals_word_for_word",
                    "test_an_encoder_needs_a_language_policy",
                    "test_the_encoder_takes_the_bundles_tokenizer_and_settings",
                    "test_an_altered_tokenizer_is_refused",
                    "test_a_repeated_task_is_a_lookup_of_the_same_read_only_arrays",
                    "test_the_cache_keeps_the_most_recently_used_tasks",
                )
            ),
            *(
                f"tests/server/test_rtc.py::{t}"
                for t in (
                    "test_the_rtc_section_round_trips_through_the_manifest",
                    "test_a_bad_rtc_section_is_refused_naming_the_field",
                    "test_a_second_input_with_a_prefix_role_is_refused",
                    "test_linear_weights_freeze_the_delay_then_decay_to_the_horizon",
                    "test_the_arrays_pad_the_leftover_and_weight_it_with_the_bundles_settings_or_the_requests",
                    "test_hello_says_the_policy_takes_a_prefix_with_its_bounds_and_defaults",
                    "test_a_request_with_a_leftover_gets_its_weights_and_one_without_samples_plainly",
                    "test_every_bad_prefix_field_is_refused_by_name_and_serving_goes_on",
                    "test_the_control_loop_path_takes_the_prefix_and_reports_a_bad_one",
                    "test_the_request_codec_carries_the_prefix_in_a_data_frame_of_its_own",
                    "test_the_infer_command_sends_a_prefix_file",
                    "test_a_policy_without_real_time_chunking_names_the_first_field_sent",
                    "test_prefix_inputs_need_an_rtc_section_and_take_its_settings",
                    "test_each_field_is_taken_at_both_edges_of_its_bound",
                    "test_a_delay_without_a_prefix_is_refused",
                    "test_a_prefix_of_another_type_or_shape_is_refused",
                    "test_a_prefix_with_values_that_are_not_finite_is_refused_with_their_count",
                    "test_a_delay_past_the_chunk_is_refused",
                    "test_a_horizon_outside_the_chunk_is_refused",
                    "test_an_unknown_schedule_is_refused_and_shown_cut_short",
                    "test_a_guidance_cap_that_is_not_a_finite_positive_number_is_refused",
                    "test_the_first_wrong_field_is_the_one_named",
                    "test_without_a_prefix_the_weights_are_zero_and_the_cap_the_requests_or_the_bundles",
                    "test_a_prefix_without_a_delay_is_weighted_from_step_zero",
                )
            ),
        ),
    ),
    # The parquet tables in LeRobot's types (schemas, metadata, the tasks' pandas index, atomic writes)
    # and the encoder chosen for "auto" on stand-in probes: the budget, the order, every reason logged.
    "recording-tables": Scope(
        ("runtime/recording/tables.py", "runtime/recording/codec_choice.py"),
        ("tests/recording/test_tables.py", "tests/recording/test_codec_choice.py"),
    ),
    # A dataset read back on a dataset the test writes and a stand-in decoder: episodes in index order,
    # an episode's rows in a shared data file, columns in their features' types, observations.
    "recording-reader": Scope(("runtime/recording/reader.py",), ("tests/recording/test_reader.py",)),
    # The simulators' servo-side framing, written apart from the drivers' codecs: packets built and
    # checksummed by hand, every way a packet is cut, garbled or resynchronised (the vendors' SDKs in
    # tests/drivers/test_sim_vendor_sdk.py run in the suite only: seconds per mutant).
    "sim-wire": Scope(
        ("drivers/sim/wire.py", "drivers/sim/dialect.py", "drivers/sim/memory.py"),
        ("tests/drivers/test_sim_wire.py",),
    ),
    # A simulated servo on a clock the test moves, the chain's packet handler called directly with
    # its replies read off the pty, faults, unplug and replug, the sim arm.
    "sim-servo": Scope(
        ("drivers/sim/servo.py", "drivers/sim/simulator.py", "drivers/sim/arm.py"),
        (
            "tests/drivers/test_sim_servo.py",
            "tests/drivers/test_sim_simulator.py",
            "tests/drivers/test_sim_arm.py",
        ),
    ),
    # The camera producer: the synthetic pattern worked by hand, a PUB socket's parts, the pace on a
    # clock the test moves, the fps and bind refusals; OpenCV stood in for.
    "producers-camera": Scope(("runtime/producers/camera.py",), ("tests/producers/test_camera.py",)),
    # The direct OpenVINO engine on a tiny program compiled in the test (its export_model blob as the
    # delegate's payload; no export, no torch): the refusals, the properties OpenVINO applied read back
    # from the compiled model, a blob that does not import, the signature, a failed or unwritten run.
    "engine-openvino": Scope(("runtime/engine/openvino_engine.py",), ("tests/engine/test_openvino_engine.py",)),
    # The ExecuTorch engine on two tiny programs the real exporter made, cached on disk on first use
    # (tests/engine/exported.py): loading and its refusals, what the backend runs at asked of OpenVINO,
    # every input dtype against the program, what is said at load, failed and unwritten runs (a stand-in
    # native method).
    "engine-executorch": Scope(("runtime/engine/executorch_engine.py",), ("tests/engine/test_executorch_engine.py",)),
    # GroupNorm as per-group statistics, in process: the numbers against nn.GroupNorm and worked by hand,
    # bf16 activations, every layer replaced. The file's lowering tests run subprocesses and read docs/repro,
    # which mutmut's mutants/ folder does not hold: they run in the suite only.
    "bundle-group-norm": Scope(
        ("runtime/export/group_norm.py",),
        tuple(
            f"tests/engine/test_group_norm.py::{t}"
            for t in (
                "test_same_numbers_as_group_norm",
                "test_low_precision_activations_keep_float32_statistics",
                "test_every_group_norm_is_replaced_and_keeps_its_parameters",
                "test_each_group_is_normalised_by_its_own_mean_and_variance_plus_eps",
                "test_a_weight_or_a_bias_alone_is_applied_as_group_norm_applies_it",
                "test_the_rewrite_is_logged_with_its_count",
            )
        ),
    ),
    # The recorder on a stand-in sink and stand-in encoders (a ring the test holds, no process, no
    # encode): the control thread's side never waiting, drops and overruns counted, the writer
    # thread's order, failures and clean-up, the encoders' files handed over, status field by field.
    "recording-recorder": Scope(("runtime/recording/recorder.py",), ("tests/recording/test_recorder_rules.py",)),
    # PyAV's side on a stand-in PyAV (what each call is given, in order) and a few real x264 files:
    # the [recording.video] refusals, the codec options, appending by copying packets, frame times,
    # the info LeRobot keeps, decoding a span.
    "recording-video": Scope(("runtime/recording/video.py",), ("tests/recording/test_video.py",)),
    # The encoder process's loop run in-process (stand-in pipes, video and clock, a real ring) and the
    # daemon's handle on a stand-in process (real pipes): replies, results, a death and its
    # replacement, closing. Starting a real spawned process is left to test_encoder_process.py.
    "recording-encoder": Scope(("runtime/recording/encoder_process.py",), ("tests/recording/test_encoder_parts.py",)),
    # The dataset writer on stand-in video calls (what it asks of append_video and video_info): a
    # dataset created, continued or refused, each episode's rows, metadata, statistics and totals,
    # files rolled over at their size limits, the lock, aborts and what they leave behind.
    "recording-writer": Scope(("runtime/recording/writer.py",), ("tests/recording/test_writer.py",)),
    # Continuing a dataset after a crash while an episode was being finished: what info.json does not
    # count dropped (rows, an episodes row, a task, camera frames cut by copying packets, files begun for
    # it, the statistics combined again), on datasets the writer makes, with x264 camera files.
    "recording-uncounted": Scope(
        ("runtime/recording/uncounted.py", "runtime/recording/video.py"),
        ("tests/recording/test_writer_crash.py",),
        ("runtime.recording.uncounted.*", "runtime.recording.video.x_keep_frames*"),
    ),
    # `dataset check` rule by rule on datasets the dataset writer makes and stand-in videos: every
    # problem named by file and field, word for word, and what it stops the checker reading. Two
    # scopes of one module, each in minutes: the report, info.json, tasks and episodes; then the
    # data files, the videos and stats.json.
    "recording-check-meta": Scope(
        ("runtime/recording/check.py",),
        ("tests/recording/test_check_rules.py", "tests/recording/test_check_malformed.py"),
        tuple(
            f"runtime.recording.check.{f}*"
            for f in (
                "xǁCheckReportǁ",
                "x__stat_shape",
                "x_check_dataset",
                "x__check_info",
                "x__check_feature",
                "x__check_tasks",
                "x__check_episodes",
                "x__check_column",
            )
        ),
    ),
    "recording-check-files": Scope(
        ("runtime/recording/check.py",),
        ("tests/recording/test_check_rules.py", "tests/recording/test_check_malformed.py"),
        tuple(f"runtime.recording.check.x__check_{f}*" for f in ("data", "videos", "stats")),
    ),
    # The command line's entry point and its small commands, in process with stand-ins for the client,
    # the installer, the checker and the benchmarks: every command and option with its default and help,
    # exit statuses by kind of failure, what each handler is handed and prints.
    "commands-cli": Scope(
        (
            "runtime/cli.py",
            "runtime/__main__.py",
            "runtime/arm/__main__.py",
            *(f"runtime/commands/{m}.py" for m in ("bundle", "status", "dataset")),
        ),
        tuple(f"tests/commands/test_{m}.py" for m in ("cli", "bundle", "status", "dataset")),
    ),
    # The parsers of the larger commands (control, camera, replay, teleop, serve, infer, keys and their
    # benchmarks): every option's name, default, type, choices, metavar and help, the handler each runs, usage
    # errors. Only the option tests run, so each mutant takes a fraction of a second.
    "commands-parsers": Scope(
        tuple(f"runtime/commands/{m}.py" for m in ("control", "teleop", "serve")),
        (
            *(
                f"tests/commands/test_control.py::{t}"
                for t in (
                    "test_the_control_options",
                    "test_the_camera_replay_and_bench_options",
                    "test_a_bad_command_line_is_a_usage_error",
                    "test_the_defaults_parsed",
                )
            ),
            "tests/commands/test_teleop.py::test_the_options",
            "tests/commands/test_teleop.py::test_a_leader_is_needed_one_way_only",
            "tests/commands/test_serve.py::test_the_serve_infer_and_keys_options",
            "tests/commands/test_serve.py::test_the_benchmarks_options",
            "tests/commands/test_cli.py::test_every_command_and_benchmark_is_offered_with_what_it_does",
        ),
        tuple(f"runtime.commands.{m}.x_register*" for m in ("control", "teleop", "serve")),
    ),
    # The same for export, lower, quantize, check and bench engine, and the engine options check shares.
    "commands-parsers-engine": Scope(
        ("runtime/commands/engine.py",),
        (
            *(
                f"tests/commands/test_engine.py::{t}"
                for t in (
                    "test_the_export_options",
                    "test_the_lower_quantize_and_check_options",
                    "test_the_bench_engine_options",
                    "test_a_bad_command_line_is_a_usage_error",
                )
            ),
            "tests/commands/test_cli.py::test_every_command_and_benchmark_is_offered_with_what_it_does",
        ),
        ("runtime.commands.engine.x_register*", "runtime.commands.engine.x__add_engine_options*"),
    ),
    # The operator's commands' handlers in process: control (a release naming the latch status shows now,
    # refusals on stderr), camera, replay and the loop's benchmarks; teleop (the lead's bound, the leader
    # opened, the station refused, everything closed however it ends) with stand-ins for client, leader, station.
    "commands-control": Scope(
        ("runtime/commands/control.py", "runtime/commands/teleop.py"),
        ("tests/commands/test_control.py", "tests/commands/test_teleop.py"),
        (
            *(f"runtime.commands.control.x__{f}*" for f in ("control", "camera", "replay", "bench_loop")),
            "runtime.commands.teleop.x__teleop*",
            "runtime.commands.teleop.x__bench_teleop*",
        ),
    ),
    # serve, infer, keys and the serving benchmarks' handlers: the daemon on its config, the observation,
    # task and prefix an infer sends, refusal (1) and silence (2), key pairs never replaced without --force,
    # the engine each benchmark serves (stand-ins for client, daemon, loader and benchmarks; real key files).
    "commands-serve": Scope(
        ("runtime/commands/serve.py",),
        ("tests/commands/test_serve.py",),
        tuple(
            f"runtime.commands.serve.x__{f}*"
            for f in ("serve", "infer", "keys", "bench_serve", "bench_canary", "bench_soak", "engine_maker")
        ),
    ),
    # export, lower, quantize, check and bench engine's handlers and the CPU and device lists: options that
    # do not apply refused, what each is handed, check's report on a clock the test moves and its exit status.
    "commands-engine": Scope(
        ("runtime/commands/engine.py",),
        ("tests/commands/test_engine.py",),
        tuple(
            f"runtime.commands.engine.x_{f}*"
            for f in (
                "parse_cpu_list",
                "parse_devices",
                "_names",
                "cmd_export",
                "cmd_quantize",
                "cmd_lower",
                "check_bundle",
                "cmd_check",
                "cmd_bench_engine",
                "_units",
            )
        ),
    ),
    # INT8's decisions on stand-ins (no quantisation, no export): the observations calibrated and held out
    # on (.npz files, a stand-in dataset reader), the action error, the masks left alone, the child's files,
    # the gate's verdict and record. quantize_bundle and the child's _run_blob drive a real NNCF run and a
    # real program: left to tests/engine/test_quantize.py.
    "bundle-quantize": Scope(
        ("runtime/export/quantize.py",),
        ("tests/export/test_quantize.py", "tests/export/test_quantize_gate.py"),
        tuple(
            f"runtime.export.quantize.{f}*"
            for f in (
                "x_load_observations",
                "x__no_prefix",
                "x__npz_observations",
                "x__dataset_observations",
                "x__frames",
                "x_action_error",
                "x_boolean_consumers",
                "xǁNativeCrashǁ",
                "x_run_isolated",
                "x_int8_outputs",
                "x_first_that_runs",
                "x_accuracy_gate",
                "x_gate_summary",
            )
        ),
    ),
    # quantize_bundle whole and the gate child's body, with NNCF's quantize_model, the lowering, the gate
    # and OpenVINO stood in for: the refusals, the split, the quantizer's options and fallback, stdout kept
    # for --json, the INT8 bundle's files and manifest, nothing left when a step fails.
    "bundle-quantize-run": Scope(
        ("runtime/export/quantize.py",),
        ("tests/export/test_quantize_run.py",),
        ("runtime.export.quantize.x_quantize_bundle*", "runtime.export.quantize.x__run_blob*"),
    ),
    # A LeRobot checkpoint up to its export plan, without a model: the plan on a stand-in family and
    # loader, the family's defaults, the families, the VLM directory, the action scale. load_checkpoint and
    # policy_class load LeRobot's own classes: left to tests/engine/test_lerobot*.py.
    "lerobot-plan": Scope(
        tuple(f"runtime/export/lerobot/{m}.py" for m in ("__init__", "plan", "family", "families", "loader")),
        ("tests/export/test_lerobot_plan.py", "tests/export/test_lerobot_checkpoint.py"),
        (
            *(f"runtime.export.lerobot.{m}.*" for m in ("plan", "family", "families")),
            "runtime.export.lerobot.loader.x_resolve_vlm*",
            "runtime.export.lerobot.loader.x_action_scale*",
        ),
    ),
    # config.json read and refused word for word, and the joint names (configs written in the test).
    "lerobot-checkpoint": Scope(
        ("runtime/export/lerobot/checkpoint.py",),
        ("tests/export/test_lerobot_checkpoint.py", "tests/export/test_lerobot_plan.py"),
    ),
    # The generic graph on stand-in processors, its seeded test case, the draws read from noise inputs.
    "lerobot-graph": Scope(
        ("runtime/export/lerobot/graph.py", "runtime/export/lerobot/draws.py"),
        ("tests/export/test_lerobot_graph.py", "tests/export/test_lerobot_families.py"),
    ),
    # What each family adds, on stand-in policies (a config of plain values): refusals, steps, noise inputs
    # and the order the draws are read in; TD-MPC's gather; importing LeRobot and its shims. The families'
    # predict (and Diffusion's sample_actions) run LeRobot's model code: left to the export tests,
    # tests/engine/test_lerobot_{diffusion,tdmpc,vqbet}.py; ACT has nothing else.
    "lerobot-policies": Scope(
        tuple(f"runtime/export/lerobot/{m}.py" for m in ("diffusion", "tdmpc", "vqbet", "torchvision_shim", "smolvla")),
        ("tests/export/test_lerobot_families.py",),
        (
            "runtime.export.lerobot.diffusion.x_check_scheduler*",
            "runtime.export.lerobot.diffusion.x_timesteps*",
            *(
                f"runtime.export.lerobot.diffusion.xǁDiffusionFamilyǁ{f}*"
                for f in ("__init__", "check", "first_step", "noise_inputs")
            ),
            "runtime.export.lerobot.tdmpc.x__gather_along_dim*",
            "runtime.export.lerobot.tdmpc.x__gathers*",
            *(
                f"runtime.export.lerobot.tdmpc.xǁTdmpcFamilyǁ{f}*"
                for f in ("check", "_plan_steps", "usable_steps", "default_steps", "noise_inputs", "_draws")
            ),
            *(f"runtime.export.lerobot.vqbet.xǁVqbetFamilyǁ{f}*" for f in ("_query_tokens", "noise_inputs", "_draws")),
            "runtime.export.lerobot.torchvision_shim.*",
            # SmolVLA, sampled: real-time chunking's fields, the refusals before tracing, the guidance weight
            "runtime.export.lerobot.smolvla.x__guidance_weight*",
            *(
                f"runtime.export.lerobot.smolvla.xǁSmolvlaFamilyǁ{f}*"
                for f in (
                    "rtc_enabled",
                    "_rtc_fields",
                    "_check_rtc",
                    "noise_inputs",
                    "prefix_inputs",
                    "rtc",
                    "example_prefix",
                )
            ),
        ),
    ),
    # LeRobot's model code as the graph runs it: loading a checkpoint with LeRobot's classes, each family's
    # predict (Diffusion's sampling loop, TD-MPC's planner, VQ-BeT's codes, ACT's chunk), against LeRobot's
    # own pipeline with the same draws, in eager mode (tiny random checkpoints; no export). SmolVLA's model
    # code needs SmolVLM: left to tests/engine/test_lerobot_smolvla*.py.
    "lerobot-models": Scope(
        tuple(f"runtime/export/lerobot/{m}.py" for m in ("loader", "act", "diffusion", "tdmpc", "vqbet")),
        (
            "tests/engine/test_lerobot.py::test_graph_is_lerobots_pipeline",
            "tests/engine/test_lerobot.py::test_a_checkpoint_without_its_normaliser_or_unnormaliser_is_refused",
            "tests/engine/test_lerobot.py::test_loading_a_checkpoint_keeps_lerobots_words_off_stdout",
            "tests/engine/test_lerobot_smolvla.py::test_a_vlm_directory_transformers_cannot_load_is_named_with_its_reason",
            "tests/engine/test_lerobot_smolvla.py::test_a_checkpoints_tokenizer_named_by_hub_id_is_taken_from_the_local_vlm",
            "tests/engine/test_lerobot_diffusion.py::test_graph_matches_lerobot_sampling_with_history",
            "tests/engine/test_lerobot_diffusion.py::test_graph_matches_lerobot_with_two_cameras",
            "tests/engine/test_lerobot_tdmpc.py::test_graph_is_lerobots_planner",
            "tests/engine/test_lerobot_tdmpc.py::test_graph_is_lerobots_policy_without_planning_or_with_repeats",
            "tests/engine/test_lerobot_vqbet.py::test_graph_is_lerobots_model",
            "tests/engine/test_lerobot_vqbet.py::test_graph_is_lerobots_model_looking_at_one_frame",
            # loading a SmolVLA: its VLM found locally, its RTC settings
            "tests/engine/test_lerobot_smolvla.py::test_graph_is_lerobots_pipeline_with_tasks_and_noise",
            "tests/engine/test_lerobot_smolvla.py::test_export_refuses_a_vlm_it_cannot_find_offline",
            "tests/engine/test_lerobot_smolvla_rtc.py::test_the_graph_is_lerobots_rtc_path",
            "tests/engine/test_lerobot_smolvla_rtc.py::test_export_rtc_flag_enables_it_on_a_checkpoint_without",
        ),
        (
            "runtime.export.lerobot.loader.x_policy_class*",
            "runtime.export.lerobot.loader.x_load_checkpoint*",
            "runtime.export.lerobot.act.*",
            "runtime.export.lerobot.diffusion.x_sample_actions*",
            "runtime.export.lerobot.diffusion.xǁDiffusionFamilyǁpredict*",
            "runtime.export.lerobot.tdmpc.xǁTdmpcFamilyǁpredict*",
            "runtime.export.lerobot.vqbet.xǁVqbetFamilyǁpredict*",
        ),
    ),
    # SmolVLA's model code as the graph runs it, sampled: the vision positions, RoPE, the resize as matrix
    # products, the attention masks counted in integers, the guided flow step, each check against LeRobot's
    # own; against LeRobot's pipeline and RTC path in eager mode (a tiny SmolVLA with a small VLM).
    "lerobot-smolvla": Scope(
        ("runtime/export/lerobot/smolvla.py",),
        (
            "tests/engine/test_lerobot_smolvla.py::test_graph_is_lerobots_pipeline_with_tasks_and_noise",
            "tests/engine/test_lerobot_smolvla.py::test_export_refuses_a_vlm_it_cannot_find_offline",
            "tests/engine/test_lerobot_smolvla_rtc.py::test_the_graph_is_lerobots_rtc_path",
            "tests/engine/test_lerobot_smolvla_rtc.py::test_weights_are_lerobots_for_every_schedule",
            "tests/engine/test_lerobot_smolvla_rtc.py::test_a_lerobot_whose_guidance_differs_is_refused_before_tracing",
        ),
        tuple(
            f"runtime.export.lerobot.smolvla.{f}*"
            for f in (
                "x__full_mask_position_ids",
                "x__apply_rope",
                "x__check_rope",
                "xǁ_MatrixResizeǁ",
                "x__resize_matrices",
                "xǁ_TorchCountingInIntegersǁ",
                "x__make_att_2d_masks",
                "x__check_masks",
                "x__guided_step",
                "x__check_guidance",
                "xǁSmolvlaFamilyǁpredict",
            )
        ),
    ),
    # The server's requests on real ipc sockets and a stand-in engine (no OpenVINO): each kind answered
    # or refused word for word, what is counted, hello's policy description, replies forwarded to the
    # socket they came in on, the clients heard. The socket limits are server-limits'.
    "server-requests": Scope(
        ("runtime/server/server.py",),
        ("tests/server/test_dispatch.py",),
        (
            "runtime.server.server.x_policy_info*",
            "runtime.server.server.x__prefix_info*",
            "runtime.server.server.x_task_encoder*",
            *(
                f"runtime.server.server.xǁPolicyServerǁ{m}*"
                for m in ("_handle", "_refuse__", "_language", "_prefix_arrays", "_heard", "_forward_replies")
            ),
        ),
    ),
    # Infers on the same stand-ins: checked (noise, tokens and prefix inputs sent by a client refused),
    # queued, refused busy or superseded, shutting down, after a failed canary; the control loop's own
    # path ahead of the network, its history; job errors to a callback or a client.
    "server-infer": Scope(
        ("runtime/server/server.py",),
        ("tests/server/test_dispatch.py",),
        tuple(
            f"runtime.server.server.xǁPolicyServerǁ{m}*"
            # _reply: _reply_job_error and _reply_error
            for m in ("_submit", "_refuse_noise", "submit_local", "observe_local", "_reply")
        ),
    ),
    # The server's life: start and each failure cleaned up, the I/O loop, a graceful, forced or timed-out
    # stop, a reloaded engine, the stats snapshot; a stand-in engine, real sockets. The requests' tests
    # too: they use what start() sets up (hello's body, the prefix inputs).
    "server-lifecycle": Scope(
        ("runtime/server/server.py",),
        ("tests/server/test_server_lifecycle.py", "tests/server/test_dispatch.py"),
        tuple(
            f"runtime.server.server.xǁPolicyServerǁ{m}*"
            for m in (
                "__init__",
                "start",
                "_release_instance",
                "_start",
                "stop",
                "_stop_context",
                "replace_engine",
                "__enter__",
                "__exit__",
                "snapshot",
                "_io_loop",
                "_shutdown_step",
                "_close_sockets",
            )
        ),
    ),
    # The [server.curve] table (the rest of [server] is server-limits'); runtime/protocol/__init__.py
    # only re-exports names (no function to mutate).
    "server-config": Scope(
        ("runtime/server/config.py", "runtime/protocol/__init__.py"),
        ("tests/server/test_server_config.py",),
        ("runtime.server.config.xǁCurveConfigǁ*",),
    ),
    # Exporting and lowering around ExecuTorch: the factory, every refusal before the slow steps, the
    # manifest and test case written, the staged directory, lower-precision casts, lower_bundle; tiny
    # torch models exported for real, the lowering itself a stand-in returning a program built by hand.
    "bundle-export-rules": Scope(
        ("runtime/export/export.py", "runtime/export/trace.py"),
        ("tests/export/test_export_rules.py",),
        (
            *(
                f"runtime.export.export.x_{f}*"
                for f in (
                    "check_device_present",
                    "lower_program",
                    "_program_entry",
                    "parse_tolerance",
                    "staged_directory",
                    "_unify_operand_dtypes",
                    "tool_versions",
                )
            ),
            *(
                f"runtime.export.trace.x_{f}*"
                for f in (
                    "load_factory",
                    "_named_outputs",
                    "_strip_batch",
                    "input_role",
                    "_tensor_dtype",
                    "default_scale",
                )
            ),
        ),
    ),
    # export_bundle and lower_bundle themselves, the unbatched and lower-precision wrappers, on the same
    # tests: tiny models exported for real, the lowering a stand-in (558 mutants, about 11 minutes).
    "bundle-export": Scope(
        ("runtime/export/export.py", "runtime/export/trace.py"),
        ("tests/export/test_export_rules.py",),
        (
            *(
                f"runtime.export.export.x_{f}*"
                for f in ("export_bundle", "build_bundle", "lower_bundle", "at_precision", "export_for_lowering")
            ),
            *(f"runtime.export.trace.x_{f}*" for f in ("trace_policy", "_unbatched", "reference_spread")),
        ),
    ),
    # Benchmarks, sampled: the functions that turn samples into the numbers a claim rests on (summaries,
    # period errors and missing writes at the servos, steal, the CPU stated, what reached the servos
    # after a kill, the worst writes); the runs that drive a workload are measurements, not decisions.
    "bench-measures": Scope(
        (
            "runtime/bench/stats.py",
            "runtime/bench/machine.py",
            "runtime/bench/soak.py",
            "tools/bench/field/machine.py",
            "tools/bench/field/measures.py",
            "tools/bench/rtc.py",
        ),
        (
            "tests/bench/test_measures.py",
            "tests/tools/bench/test_rtc.py::test_a_quantile_leaves_out_nan_and_is_nan_of_nothing",
            "tests/tools/bench/field/test_measures.py",
            *(
                f"tests/tools/bench/field/test_machine.py::{t}"
                for t in (
                    "test_steal_is_the_eighth_field_of_each_cpus_line",
                    "test_steal_between_two_moments_is_taken_from_the_samples_around_them",
                    "test_steal_is_read_per_cpu_and_differenced_between_samples",
                )
            ),
        ),
        (
            "runtime.bench.stats.*",
            "runtime.bench.machine.x_cpu_summary*",
            "runtime.bench.machine.x_cpu_line*",
            "runtime.bench.soak.x__at*",
            "tools.bench.field.machine.x_read_steal*",
            "tools.bench.field.machine.xǁStealSamplerǁms*",
            "tools.bench.field.machine.xǁStealSamplerǁreport*",
            "tools.bench.field.measures.x_period_errors_ms*",
            "tools.bench.field.measures.x_write_periods*",
            "tools.bench.field.measures.x_teleop_latency*",
            "tools.bench.field.measures.x_after_kill*",
            "tools.bench.field.measures.x_worst_writes*",
            "tools.bench.rtc.x__q*",
        ),
    ),
    # The built-in ACT-style policy: its backbone against ResNet's trunk written out in the test, its
    # attention and layers against torch.nn's, the whole forward, the demo's ramp to a reachable pose.
    "policies-act": Scope(("runtime/policies/act.py",), ("tests/policies/test_act.py",)),
    # Starting the arm process (its command, environment and configuration), the hand-shake (waiting,
    # failing, ending early, stopped while waiting), e-stops numbered, shutdown and killing: a stand-in
    # arm process speaking the link's messages, started as the real one is.
    "arm-link-start": Scope(
        ("runtime/arm_control/link.py",),
        ("tests/arm_control/test_link_start.py", "tests/arm_control/test_link.py"),
        tuple(
            f"runtime.arm_control.link.xǁArmLinkǁ{m}*"
            for m in ("start", "_handshake", "shutdown", "_kill", "alive", "death", "estop", "request_estop")
        ),
    ),
}


def _copy_tree(dst: Path, rev: str | None) -> None:
    """The working tree as git sees it (tracked and untracked-but-not-ignored files), or a revision."""
    if dst.exists():
        shutil.rmtree(dst)
    if rev is not None:
        dst.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, check=True)
        return
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    for raw in files:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


def _config(scope: Scope) -> str:
    def toml_list(items: tuple[str, ...] | list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return f"""
[tool.mutmut]
source_paths = ["runtime", "drivers", "tools"]
only_mutate = {toml_list(scope.modules)}
pytest_add_cli_args_test_selection = {toml_list([*scope.tests, "-p", "no:cacheprovider", "-q"])}
also_copy = ["configs", "systemd"]
process_isolation = "forkserver"
forkserver_warmup = "collect"
# the machine is shared: a generous timeout, so a slow start is not taken for a killed mutant. mutmut
# kills a mutant after (measured time of its tests + constant) x multiplier seconds of wall clock;
# a mutant that hangs a socket test (a thread waiting forever) waits out the whole of it, so the
# margin is 10x plus 30 s rather than more: at 40x + 200 s a handful of hangs stalled a scope for
# an hour.
timeout_multiplier = 10.0
timeout_constant = 3.0
use_git_change_detection = false
# What is logged is read by people, not asserted by tests (except where a log line is the behaviour):
# log calls are left alone so the score counts decisions, not wording.
do_not_mutate_patterns = ['^\\s*log\\.(debug|info|warning|error|exception)\\(']
"""


def run_scope(name: str, scope: Scope, max_children: int, rev: str | None = None) -> dict[str, object]:
    where = WORK / (name if rev is None else f"{name}@{rev}")
    _copy_tree(where, rev)
    # at an older revision, only the test files that existed then (a test id names its file first)
    scope = Scope(scope.modules, tuple(t for t in scope.tests if (where / t.split("::")[0]).exists()), scope.functions)
    if not scope.tests:
        return {"not_run": f"none of the scope's test files exist at {rev}"}
    with (where / "pyproject.toml").open("a") as fh:
        fh.write(_config(scope))
    mutmut = str(Path(sys.executable).with_name("mutmut"))
    # the tiny programs the engine tests export once (tests/engine/exported.py): shared with the checkout
    env = {
        **os.environ,
        "PYTHONPATH": "",
        "LEROBOT_RUNTIME_TEST_PROGRAMS": os.environ.get("LEROBOT_RUNTIME_TEST_PROGRAMS")
        or str(ROOT / ".cache" / "test-programs"),
    }
    started = time.monotonic()
    with (where / "mutmut-run.log").open("w") as log:
        subprocess.run(
            [mutmut, "run", "--max-children", str(max_children), *scope.functions],
            cwd=where,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    subprocess.run([mutmut, "export-cicd-stats"], cwd=where, env=env, check=True, capture_output=True)
    stats: dict[str, object] = json.loads((where / "mutants" / "mutmut-cicd-stats.json").read_text())
    results = subprocess.run([mutmut, "results"], cwd=where, env=env, capture_output=True, text=True).stdout
    survivors = [line.strip().split(":")[0] for line in results.splitlines() if line.strip().endswith(": survived")]
    stats["survivors"] = survivors
    if not any(int(str(stats.get(k, 0))) for k in ("killed", "survived", "no_tests", "timeout")):
        # e.g. the tests failed before any mutant ran ("failed to collect stats"): no score at all
        stats["not_run"] = f"mutmut checked no mutant; see {where / 'mutmut-run.log'}"
    stats["seconds"] = round(time.monotonic() - started)
    return stats


def score(stats: dict[str, object]) -> float:
    return mutation_ledger.score_of(stats)[0]


def _revision(rev: str | None) -> str:
    """The revision a run mutated: the commit (short), ``+changes`` when the working tree differs from it."""
    git = ["git", "-C", str(ROOT)]
    out = subprocess.run([*git, "rev-parse", "--short", rev or "HEAD"], capture_output=True, text=True, check=False)
    commit = out.stdout.strip() or "unknown"
    if rev is None:
        dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, check=False).stdout
        commit += "+changes" if dirty.strip() else ""
    return commit


def _machine() -> str:
    """The CPU model, how many CPUs and the load average: what a run's time and timeouts depend on."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    return f"{model or 'unknown CPU'}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"


def record(name: str, stats: dict[str, object], rev: str | None, tests: list[str] | None) -> None:
    """The run in the ledger, and the ledger's documents rendered again."""
    ledger = mutation_ledger.load()  # re-read first: another run may have recorded a scope meanwhile
    mutation_ledger.record_run(
        ledger,
        name,
        stats,
        when=time.strftime("%Y-%m-%d"),
        revision=_revision(rev),
        machine=_machine(),
        rev=rev,
        tests=tests,
    )
    mutation_ledger.save(ledger)
    mutation_ledger.write_docs(ledger, SCOPES)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scopes", nargs="*", metavar="SCOPE", help=f"one of {', '.join(SCOPES)} (default: all)")
    p.add_argument("--list", action="store_true", help="print each scope's modules and tests, then exit")
    p.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    p.add_argument("--rev", help="mutate this git revision instead of the working tree (a 'before' score)")
    p.add_argument("--tests", nargs="+", help="run these test paths instead of the scope's own")
    p.add_argument(
        "--ledger", action="store_true", help="render docs/mutation-ledger.md and docs/testing.md's scores, then exit"
    )
    args = p.parse_args(argv)
    if args.ledger:
        mutation_ledger.write_docs(mutation_ledger.load(), SCOPES)
        print(f"rendered {mutation_ledger.LEDGER_MD} and the scores in {mutation_ledger.TESTING_MD}")
        return 0
    if args.list:
        for name, scope in SCOPES.items():
            only = f" (only {', '.join(scope.functions)})" if scope.functions else ""
            print(f"{name}: mutates {', '.join(scope.modules)}{only}; runs {', '.join(scope.tests)}")
        return 0
    names = args.scopes or list(SCOPES)
    unknown = [n for n in names if n not in SCOPES]
    if unknown:
        p.error(f"unknown scope(s) {', '.join(unknown)}; expected {', '.join(SCOPES)}")
    WORK.mkdir(exist_ok=True)
    summary_path = WORK / "summary.json"
    summary: dict[str, dict[str, object]] = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    for name in names:
        scope = SCOPES[name]
        if args.tests:
            scope = Scope(scope.modules, tuple(args.tests), scope.functions)
        print(f"== {name}: {', '.join(scope.modules)}; tests {', '.join(scope.tests)}", flush=True)
        stats = run_scope(name, scope, args.max_children, args.rev)
        # re-read first: another run may have finished a scope meanwhile
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        summary[name if args.rev is None else f"{name}@{args.rev}"] = stats
        summary_path.write_text(json.dumps(summary, indent=2))
        record(name, stats, args.rev, args.tests)
        if "not_run" in stats:
            print(f"   not run: {stats['not_run']}")
            continue
        print(
            f"   killed {stats.get('killed')} + timeout {stats.get('timeout')}, survived {stats.get('survived')}, "
            f"no tests {stats.get('no_tests')}, other {stats.get('segfault')} segfault / {stats.get('suspicious')} "
            f"suspicious; score {score(stats):.1f}% ({stats['seconds']} s)",
            flush=True,
        )
        for s in stats["survivors"]:  # type: ignore[attr-defined]
            print(f"   survived: {s}")
    print(f"summary: {summary_path}; ledger: {mutation_ledger.LEDGER_MD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
