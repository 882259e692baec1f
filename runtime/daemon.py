"""The daemon lifecycle: startup, a ticking main loop, shutdown in a fixed order.

Shaped like uvicorn's ``Server``: signal handlers only set flags; the main thread ticks every
``daemon.tick_s`` and does periodic work in :meth:`Daemon.on_tick` (systemd watchdog, stats log
line); the first SIGINT/SIGTERM asks for a graceful stop (queued infers may finish within
``daemon.graceful_timeout_s``), a second SIGINT forces it. systemd hears READY=1 only once the
engine is loaded, the first ``engine.ready_runs`` replays of its parity gate passed (the inference
worker runs the rest before the first chunk) and every socket is bound. SIGHUP reloads what can be
reloaded in place (see :mod:`runtime.reload`) and logs what needs a restart.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from runtime.arm_control.feed import Inference, StreamFeed
from runtime.arm_control.handler import LoopControl, ServerInference
from runtime.arm_control.interface import ArmControl
from runtime.arm_control.streams import ObservationStreams
from runtime.arm_control.teleop import TeleopControl
from runtime.arm_monitor import ArmMonitor
from runtime.bundle.interface import PolicyInterface
from runtime.config import DaemonConfig, load_config
from runtime.control.config import rtc_in_effect
from runtime.engine.affinity import inference_cpus, process_on
from runtime.engine.base import Engine
from runtime.errors import ConfigError, LerobotRuntimeError
from runtime.liveness import Heartbeat, LivenessRegistry
from runtime.metrics import MetricsServer, RuntimeCollector
from runtime.reload import bundle_identity, plan_reload
from runtime.sdnotify import SystemdNotifier
from runtime.server.server import PolicyServer
from runtime.server.stats import stats_line

if TYPE_CHECKING:
    from runtime.arm_control.local_leader import LocalLeader
    from runtime.recording import EpisodeRecorder
    from runtime.remote.inference import RemoteInference

log = logging.getLogger(__name__)

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
AUTO_DUMP_SPACING_S = 5.0  # a fault storm writes one recording, not hundreds
ESTOP_SIGNAL = signal.SIGUSR1  # `systemctl kill -s USR1 lerobot-runtime`: latch the e-stop


class Daemon:
    def __init__(
        self,
        config: DaemonConfig,
        engine_factory: Callable[[], Engine] | None = None,
        notifier: SystemdNotifier | None = None,
        config_path: str | Path | None = None,
    ) -> None:
        """``config_path``: the file ``config`` came from, read again on SIGHUP (None: the defaults)."""
        self.config = config
        self.config_path = config_path
        self.engine_factory = engine_factory if engine_factory is not None else self._load_engine
        self.notifier = notifier if notifier is not None else SystemdNotifier.from_env()
        self.server: PolicyServer | None = None
        self.arm: ArmMonitor | None = None
        self.loop: ArmControl | None = None
        self.teleop: TeleopControl | None = None
        self.local_leader: LocalLeader | None = None
        self.recorder: EpisodeRecorder | None = None
        self.streams: ObservationStreams | None = None
        #: the policy the loop asks when it runs on another machine (``[policy] endpoint``)
        self.remote: RemoteInference | None = None
        #: what the loop is built from: the bundle's policy, or the remote's
        self.policy: PolicyInterface | None = None
        self._stall_logged = False
        self._last_auto_dump = -math.inf
        self._control_state: tuple[str, str | None, str | None] = ("idle", None, None)
        self._verification_failure: str | None = None
        self._gate_pending: str | None = None
        self.should_exit = False
        self.force_exit = False
        self.failed = False
        self.liveness = LivenessRegistry()
        self._heartbeat: Heartbeat | None = None
        self._stalled = False
        self._stalled_now: tuple[str, ...] = ()
        self.reload_requested = False
        self._reloading: threading.Thread | None = None
        self._bundle_id = ""
        self.metrics: MetricsServer | None = None
        self._last_watchdog = 0.0
        self._last_stats = 0.0
        self._last_arm_poll = 0.0
        self._previous_handlers: dict[int, Any] = {}

    def _load_engine(self) -> Engine:
        from runtime.engine.loader import load_engine
        from runtime.export.demo import with_bundle

        # READY once the gate's first replays passed; the inference worker runs the rest before serving
        return load_engine(with_bundle(self.config.engine), staged=True)

    # --- signals -----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals can only be handled on the main thread (e.g. when run inside tests)
        for sig in HANDLED_SIGNALS:
            self._previous_handlers[sig] = signal.signal(sig, self.handle_exit)
        self._previous_handlers[ESTOP_SIGNAL] = signal.signal(ESTOP_SIGNAL, self.handle_estop)

    def restore_signal_handlers(self) -> None:
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers.clear()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Only flags: the main loop does the work on its next tick.
        if sig == signal.SIGHUP:
            self.reload_requested = True
        elif self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    def handle_estop(self, sig: int, frame: FrameType | None) -> None:
        # A flag on the loop, carried out at its next tick.
        if self.loop is not None:
            self.loop.request_estop(f"signal {signal.Signals(sig).name}")

    # --- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        self.install_signal_handlers()
        try:
            try:
                self.startup()
            except InterruptedError as e:  # SIGTERM while waiting for the arm: a clean stop
                log.info("%s", e)
                return 0
            self.main_loop()
        finally:
            self.shutdown()
            self.restore_signal_handlers()
        return 1 if self.failed else 0

    def startup(self) -> None:
        server = self._start_remote_policy() if self.config.policy.remote else self._start_local_policy()
        self.server = server
        if self.config.arm.kind != "none":
            self.notifier.status("connecting the arm")
            self.arm = ArmMonitor(self.config.arm, on_change=self._arm_changed)
        if self.arm is not None and self.config.control.enabled:
            # the arm process opens the port itself (and waits for an absent arm); READY=1 once it has it
            self._start_arm_process(server)
        elif self.arm is not None:
            # no control loop: the daemon reads the arm for status; READY=1 only once it answers
            self.arm.open_waiting(
                self.config.daemon.arm_wait_s,
                should_stop=lambda: self.should_exit,
                on_wait=self.notifier.status,
            )
            server.arm_status = self.arm.status
        if self.config.metrics.port:
            self.metrics = MetricsServer(
                self.config.metrics,
                RuntimeCollector(
                    server.snapshot,
                    lambda: server.info,
                    self._stalled_names,
                    self._control_status,
                    lambda: self.recorder.status() if self.recorder is not None else None,
                ),
            )
        arm = f"; arm {self.config.arm.kind}" if self.arm is not None else "; no arm"
        if self.loop is not None:
            arm += f", control loop at {self.loop.rate_hz:g} Hz (idle until control start)"
        status = self._serving_status() + arm
        now = time.monotonic()
        self._last_watchdog = self._last_stats = self._last_arm_poll = now
        self.notifier.ready(status)
        log.info("ready: %s", status)

    def _start_local_policy(self) -> PolicyServer:
        """The policy in this daemon: its engine on the server's inference worker."""
        self.notifier.status("loading the policy")
        self._bundle_id = bundle_identity(self.config.engine.bundle)
        self._heartbeat = self.liveness.register("inference worker", self.config.daemon.inference_stall_s)
        server = PolicyServer(self.engine_factory, self.config.server, heartbeat=self._heartbeat)
        if self.config.arm.kind != "none" and self.config.control.enabled:
            server.no_control_reason = "the daemon is starting: its control loop runs once the arm answers"
        engine_cfg = self.config.engine
        with process_on(inference_cpus(engine_cfg.cpus, engine_cfg.control_cpu)):
            server.start()  # loads on the worker thread, raises on a failed parity gate or bind
        self.policy = PolicyInterface.of_manifest(server.engine.manifest, f"bundle {server.engine.info.bundle}")
        return server

    def _start_remote_policy(self) -> PolicyServer:
        """``[policy] endpoint``: the loop asks a lerobot-runtime on another machine; this daemon's
        server answers control, teleop, status and hello, and runs no policy."""
        from runtime.remote.inference import RemoteInference

        cfg = self.config.policy
        self._heartbeat = self.liveness.register("remote policy client", self.config.daemon.inference_stall_s)
        heartbeat = self._heartbeat
        remote = RemoteInference(
            cfg, self.config.control.task, self.config.control.rtc, beat=lambda: heartbeat.beat("remote policy link")
        )
        self.notifier.status(f"asking the policy at {cfg.endpoint} what it serves")
        self.policy = remote.connect(should_stop=lambda: self.should_exit, on_wait=self.notifier.status)
        self.remote = remote
        assert remote.info is not None
        if cfg.fallback:
            return self._start_fallback(self.policy)
        info = replace(remote.info, engine={"where": "remote", "endpoint": cfg.endpoint, **remote.info.engine})
        server = PolicyServer(None, self.config.server, heartbeat=heartbeat, remote=info)
        if self.config.arm.kind != "none" and self.config.control.enabled:
            server.no_control_reason = "the daemon is starting: its control loop runs once the arm answers"
        server.start()
        return server

    def _start_fallback(self, remote: PolicyInterface) -> PolicyServer:
        """``[policy] fallback``: the local bundle loaded here as for a local policy (this daemon's server
        serves it), standing in for the remote when its link is lost."""
        from runtime.remote.fallback import check_fallback

        if not self.config.engine.bundle:
            raise ConfigError(
                "policy.fallback: expected [engine] bundle, the small local policy that takes over when the "
                "remote is lost, got none"
            )
        server = self._start_local_policy()
        assert self.policy is not None
        check_fallback(remote, self.policy)
        self.policy = remote  # the loop is the remote's; the local one answers the same chunks
        return server

    def _start_arm_process(self, server: PolicyServer) -> None:
        """The loop, the serial port and the envelope in the arm process, reached through its link."""
        from drivers.sim.arm import SimArm
        from runtime.arm_control.link import ArmLink

        assert self.arm is not None
        arm_cfg = self.config.arm
        if arm_cfg.kind == "sim":
            # the simulated servos stay here, as hardware would be outside the arm process; it drives
            # them through their pseudo-terminal like a USB adapter
            from drivers.calibration import load_calibration

            sim = SimArm.start(load_calibration(arm_cfg.calibration), protocol=arm_cfg.sim_protocol, connect=False)
            self.arm.sim = sim
            arm_cfg = replace(arm_cfg, kind=arm_cfg.sim_protocol, port=sim.simulator.port)
        policy = self.policy
        assert policy is not None
        rtc_in_effect(self.config.control, policy)  # a [control.rtc] the policy cannot follow: refused here
        allowed = set(os.sched_getaffinity(0))
        control_cpu = self.config.engine.control_cpu
        cpu = control_cpu if control_cpu in allowed else None
        inference: Inference
        if self.remote is not None and self.config.policy.fallback:
            from runtime.remote.fallback import Fallback

            local = ServerInference(server, self.config.control.task, self.config.control.rtc)
            name = f"{server.engine.manifest.policy_name} ({server.engine.info.bundle})"
            inference = Fallback(self.remote, local, name, self.config.policy.fallback_after_s)
            inference_cpus_now = set(server.engine.info.cpus)
        elif self.remote is not None:
            inference, inference_cpus_now = self.remote, set()
        else:
            inference = ServerInference(server, self.config.control.task, self.config.control.rtc)
            inference_cpus_now = set(server.engine.info.cpus)
        io_cpus = (allowed - inference_cpus_now) or allowed
        if self.config.control.streams:
            self.streams = ObservationStreams(self.config.control.streams, policy.observation_inputs, cpus=io_cpus)
        link = ArmLink(
            arm=arm_cfg,
            control=self.config.control,
            teleop=self.config.teleop,
            policy=policy,
            feed=StreamFeed(inference, policy, self.streams),
            cpu=cpu,
            record=self.config.recording.enabled,
        )
        if self.config.recording.enabled:
            self._start_recording(link, server)
        if self.streams is not None:
            self.streams.start()
        link.start(
            self.config.daemon.arm_wait_s,
            should_stop=lambda: self.should_exit,
            on_wait=self.notifier.status,
        )
        self.loop = link
        self.arm.source = link
        self.arm.poll()
        where = "simulated servos on a pseudo-terminal" if self.config.arm.kind == "sim" else arm_cfg.port
        positions = ", ".join(f"{n} {s.position:.1f}" for n, s in self.arm.last_state.items())
        log.info(
            "arm connected: %s %s on %s, driven by the arm process %d; positions %s",
            arm_cfg.model,
            self.config.arm.kind,
            where,
            link.pid,
            positions,
        )
        server.arm_status = self.arm.status
        control = LoopControl(
            link, self.config.daemon.state_path(), server.worker_thread_id, self.streams, inference
        )
        server.control = control
        self.teleop = control.teleop
        if self.config.teleop.leader_port:
            self._start_local_leader(link, control.teleop)

    def _start_local_leader(self, loop: ArmControl, teleop: TeleopControl) -> None:
        """``[teleop] leader_port``: the daemon reads a leader on this computer itself."""
        from runtime.arm_control.local_leader import LocalLeader
        from runtime.teleop.leader import LeaderArm

        cfg = self.config.teleop
        leader = LeaderArm.open(cfg.leader_port, cfg.leader_calibration, cfg.leader_protocol)
        try:
            self.local_leader = LocalLeader(leader, loop, cfg.leader_who)
        except BaseException:
            leader.close()
            raise
        self.local_leader.start()
        teleop.local = f"{cfg.leader_who} on {cfg.leader_port}"
        log.info(
            "teleop: reading the leader %s on %s (torque off); take over with: lerobot-runtime control teleop",
            cfg.leader_who,
            cfg.leader_port,
        )

    def _start_recording(self, loop: ArmControl, server: PolicyServer) -> None:
        """The ``[recording]`` table: episodes of the loop's ticks, opened and closed by ``teleop.episode_*``."""
        from runtime.arm_control.episodes import EpisodeTap, camera_inputs
        from runtime.recording import EpisodeRecorder, RecordingFeatures

        fps = round(loop.rate_hz)
        if abs(fps - loop.rate_hz) > 1e-6:
            raise ConfigError(
                f"recording: the control rate must be a whole number of Hz to record (LeRobot stores fps as an "
                f"integer), got control.rate_hz {loop.rate_hz:g}"
            )
        assert self.policy is not None
        cameras = camera_inputs(self.streams, self.policy.observation_inputs)
        features = RecordingFeatures(fps=fps, joint_names=loop.names, cameras=cameras)
        cpus, why = self._encoder_cpus()
        self.recorder = EpisodeRecorder.create(self.config.recording, features, cpus=cpus)
        log.info("recording: the encoders run on CPU(s) %s (%s)", ",".join(map(str, sorted(cpus))), why)
        loop.episodes = EpisodeTap(self.recorder, self.streams, cameras, loop.events)
        log.info(
            "recording: episodes go to %s at %d fps (cameras: %s)",
            self.config.recording.dataset_dir,
            fps,
            ", ".join(cameras) or "none",
        )

    def _encoder_cpus(self) -> tuple[frozenset[int], str]:
        """Where the encoder processes run: ``recording.encoder_cpus``, else every CPU the daemon may use
        when the loop asks for real-time priority (``control.rt_priority``: its SCHED_FIFO thread
        preempts a nice-10 encoder the moment it wakes, and the control CPU is otherwise idle: on 2 CPUs,
        the encoders confined to the policy's CPU starve behind inference and drop frames), else every
        CPU but the control loop's."""
        allowed = frozenset(os.sched_getaffinity(0))
        configured = frozenset(self.config.recording.encoder_cpus)
        if configured:
            if not configured <= allowed:
                raise ConfigError(
                    f"recording.encoder_cpus: expected CPUs this process may use ({sorted(allowed)}), "
                    f"got {sorted(configured)}"
                )
            return configured, "recording.encoder_cpus"
        if self.config.control.rt_priority > 0:
            return allowed, "the control loop runs at real-time priority and preempts them"
        others = allowed - {self.config.engine.control_cpu}
        if not others:
            return allowed, "no CPU but the control loop's"
        return others, "off the control loop's CPU: control.rt_priority is 0"

    def main_loop(self) -> None:
        tick = self.config.daemon.tick_s
        while not self.should_exit:
            time.sleep(tick)
            self.on_tick(time.monotonic())
            if self.server is not None and not self.server.running:
                log.error("the server's I/O thread stopped; exiting")
                self.failed = True
                break

    def on_tick(self, now: float) -> None:
        loop = self.loop
        if self.teleop is not None:
            self.teleop.expire(now)
        if loop is not None:
            loop.events.flush_to_log()
            while loop.dump_requests:
                self._dump_flight(loop, loop.dump_requests.popleft())
        if self.reload_requested:
            self.reload_requested = False
            self.reload()
        stalls = self.liveness.check(now)
        if stalls and not self._stalled:
            self.notifier.status(
                "STALLED: " + "; ".join(f"{s.name} stuck {s.seconds:.0f} s while {s.doing}" for s in stalls)
            )
        self._stalled = bool(stalls)
        alive = self._alive(now)  # the control loop's own deadline check (logs a stall once)
        self._stalled_now = tuple(s.name for s in stalls)
        interval = self.notifier.watchdog_interval_s
        # No ping while a worker is stuck: systemd's WatchdogSec then restarts the service.
        if interval is not None and not stalls and alive and now - self._last_watchdog >= interval:
            self.notifier.watchdog()
            self._last_watchdog = now
        if self.arm is not None and now - self._last_arm_poll >= self.config.daemon.arm_poll_s:
            self._last_arm_poll = now
            self.arm.poll()
        every = self.config.daemon.stats_log_interval_s
        if every > 0 and self.server is not None and now - self._last_stats >= every:
            self._last_stats = now
            line = stats_line(self.server.snapshot())
            if self.arm is not None:
                line += f"; {self.arm.describe()}"
            if loop is not None:
                line += "; " + self._control_line(loop)
            log.info("stats: %s", line)
            self.notifier.status(line)
        failure = self.server.verification_failure if self.server is not None else None
        if failure != self._verification_failure:
            # A failed self-check stops every chunk: systemctl status says so at once.
            self._verification_failure = failure
            if failure:
                self.notifier.status(f"VERIFICATION FAILED, serving no chunks until a reload: {failure}")
        pending = self.server.gate_pending if self.server is not None else None
        if pending != self._gate_pending:
            # the rest of a staged parity gate ran out: systemctl status says the policy now serves
            self._gate_pending = pending
            if not pending and not failure and self.server is not None:
                self.notifier.status(self._serving_status())
        if loop is not None:
            state = (loop.snapshot().mode, loop.estop_reason, loop.death)
            if state != self._control_state:
                # Mode changes and e-stops reach `systemctl status` at once, not at the next stats line.
                self._control_state = state
                self.notifier.status(self._control_line(loop))
                if self.arm is not None:  # and clients' hello/stats (the arm's status carries the e-stop)
                    self.arm.set_estop(bool(loop.estop_reason), loop.estop_reason or "")

    @staticmethod
    def _control_line(loop: ArmControl) -> str:
        death = loop.death
        if death:
            return f"ARM PROCESS DIED ({death}): the arm is unattended; restart the service"
        snap = loop.snapshot()
        c = snap.counters
        estop = f"E-STOP ({loop.estop_reason})" if loop.estop_reason else "no e-stop"
        return (
            f"control {snap.mode}, {estop}, chunks {c['chunks']}, starved ticks {c['starved']}, "
            f"overruns {snap.overruns}, safety {sum(snap.safety.values())}"
        )

    def _alive(self, now: float) -> bool:
        """False while the control loop misses its deadlines: systemd's watchdog then acts."""
        loop = self.loop
        stalled = loop.stalled_for(now) if loop is not None else 0.0
        if loop is not None and not loop.alive and not self.should_exit:
            stalled = max(stalled, 1.0)
        death = loop.death if loop is not None else None
        if stalled and not self._stall_logged and death:
            self._stall_logged = True
            log.error("%s; withholding the watchdog ping", death)
        elif stalled and not self._stall_logged:
            self._stall_logged = True
            log.error(
                "control loop stalled for %.1f s (mode %s, alive %s); withholding the watchdog ping",
                stalled,
                loop.snapshot().mode if loop is not None else "-",
                loop.alive if loop is not None else False,
            )
        elif not stalled:
            self._stall_logged = False
        return not stalled

    def _dump_flight(self, loop: ArmControl, reason: str) -> None:
        now = time.monotonic()
        if not reason.startswith("requested") and now - self._last_auto_dump < AUTO_DUMP_SPACING_S:
            log.info(
                "flight recorder: not written for %s (one was written %.1f s ago)", reason, now - self._last_auto_dump
            )
            return
        if not reason.startswith("requested"):
            self._last_auto_dump = now
        try:
            path = loop.recorder.dump(self.config.daemon.state_path(), reason, {"status": loop.status()})
        except OSError as e:
            log.error("flight recorder: could not write (%s): %s", reason, e)
            return
        log.info("flight recorder: %s written (%s); view with: lerobot-runtime replay %s", path.name, reason, path)

    def _control_status(self) -> dict[str, Any] | None:
        loop = self.loop
        return loop.status() if loop is not None else None

    def _stalled_names(self) -> list[str]:
        return list(self._stalled_now)  # as of the last tick: checking here would log from another thread

    def _arm_changed(self, arm: ArmMonitor) -> None:
        # systemd's STATUS= hears it at once, not at the next stats line
        if self.server is not None:
            self.notifier.status(f"{arm.describe()}; {self._serving_status()}")

    def _serving_status(self) -> str:
        assert self.server is not None
        info = self.server.info
        if self.remote is not None:
            where = ", ".join(self.server.bound_endpoints)
            return (
                f"driving {info.policy_name} served at {self.remote.endpoint} ({info.device}/{info.precision}); "
                f"control on {where}"
            )
        where = ", ".join(self.server.bound_endpoints)
        pending = self.server.gate_pending
        after = f"; {pending}, the first chunk after it" if pending else ""
        return f"serving {info.policy_name} on {info.device}/{info.precision} at {where}{after}"

    # --- reload (SIGHUP) -----------------------------------------------------------------------

    def reload(self) -> None:
        """Re-read the config: apply ``[daemon]``, load a changed policy beside the running one, and
        name what needs a restart. A config that does not parse changes nothing."""
        where = str(self.config_path) if self.config_path is not None else "the built-in defaults"
        if self._reloading is not None and self._reloading.is_alive():
            log.warning("reload (SIGHUP) ignored: the previous reload is still loading the policy")
            return
        try:
            new = load_config(self.config_path)
        except LerobotRuntimeError as e:
            log.error("reload (SIGHUP) refused, still running the previous config: %s", e)
            return
        new_bundle_id = bundle_identity(new.engine.bundle)
        plan = plan_reload(self.config, new, self._bundle_id, new_bundle_id)
        log.info("reload (SIGHUP) from %s: %s", where, plan.describe())
        if plan.daemon_keys:
            self.config = replace(self.config, daemon=new.daemon)
            if self._heartbeat is not None:
                self._heartbeat.deadline_s = new.daemon.inference_stall_s
        if plan.reload_engine and self.remote is not None:
            log.warning("reload (SIGHUP): [engine] changed, but this daemon's policy is remote ([policy]): ignored")
        elif plan.reload_engine and self.server is not None:
            self.notifier.status(f"reloading the policy from {new.engine.bundle or 'the built-in bundle'}")
            self._reloading = threading.Thread(
                target=self._reload_engine, args=(new, new_bundle_id), name="lerobot-runtime-reload", daemon=True
            )
            self._reloading.start()

    def _reload_engine(self, new: DaemonConfig, bundle_id: str) -> None:
        server = self.server
        if server is None:
            return
        old = server.engine.info
        try:
            engine = self._engine_for(new)  # loads, passes the parity gate and warms up on this thread
        except Exception as e:
            log.error("reload: the new policy was not loaded, still serving %s (%s): %s", old.bundle, old.program, e)
            self.notifier.status(f"reload failed, still serving {old.bundle}: {e}")
            return
        try:
            server.replace_engine(engine)
        except LerobotRuntimeError as e:
            engine.close()
            log.error("reload: %s; still serving %s", e, old.bundle)
            return
        self.config = replace(self.config, engine=new.engine)
        self._bundle_id = bundle_id
        info = engine.info
        log.info(
            "reload: serving %s (%s) on %s/%s from the next request",
            info.bundle,
            info.program,
            info.device,
            info.precision,
        )
        self.notifier.status(f"serving {engine.manifest.policy_name} from {info.bundle} (reloaded)")

    def _engine_for(self, config: DaemonConfig) -> Engine:
        if self.engine_factory != self._load_engine:
            return self.engine_factory()  # an injected factory (tests, embedding): it knows no config
        from runtime.engine.loader import load_engine
        from runtime.export.demo import with_bundle

        return load_engine(with_bundle(config.engine))

    def shutdown(self) -> None:
        """STOPPING=1, stop the server (graceful unless forced), release the arm, log the final stats."""
        self.notifier.stopping("shutting down")
        loop, self.loop = self.loop, None
        if loop is not None:
            # Motion first: stop, hold, then rest or torque off, while the server still answers.
            if not loop.shutdown():
                self.failed = True
                log.error("control loop: the arm could not be brought to a safe state at shutdown; check it by hand")
            loop.events.flush_to_log()
            while loop.dump_requests:
                self._dump_flight(loop, loop.dump_requests.popleft())
        local, self.local_leader = self.local_leader, None
        if local is not None:
            local.stop()
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            try:
                recorder.close()  # the loop's shutdown ended (queued) an open episode: written here
            except LerobotRuntimeError as e:
                self.failed = True
                log.error("recording: %s", e)
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            metrics.close()
        server, self.server = self.server, None
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.close()
        try:
            self._stop_server(server)
            if self.streams is not None:
                self.streams.stop()
                self.streams = None
        finally:
            arm, self.arm = self.arm, None
            if arm is not None and not arm.close():
                self.failed = True
            self.notifier.close()

    def _stop_server(self, server: PolicyServer | None) -> None:
        if server is not None:
            timeout = 0.0 if self.force_exit else self.config.daemon.graceful_timeout_s
            log.info("stopping (%s)", "forced" if self.force_exit else f"up to {timeout:g} s for queued requests")
            server.stop(timeout, force=lambda: self.force_exit)
            log.info("final stats: %s", stats_line(server.snapshot()))
