"""The policy server: ROUTER sockets on an I/O thread, the engine on a worker thread.

The I/O thread decodes requests, answers ``hello``/``ping``/``stats`` itself, checks observations
and queues infers; it never waits on inference. The worker pushes finished replies back over an
inproc socket and the I/O thread forwards them, so each ZeroMQ socket is used by one thread only.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import zmq

from runtime import __version__
from runtime.bundle.manifest import RTC_ROLES, Manifest
from runtime.engine.base import Engine
from runtime.engine.validate import check_finite, validate_inputs
from runtime.errors import InputValidationError
from runtime.liveness import Heartbeat
from runtime.protocol.codec import decode_request, encode_error, encode_reply
from runtime.protocol.errors import (
    BadInputError,
    ErrorInfo,
    InternalError,
    NoControlError,
    NoPolicyError,
    ServerError,
)
from runtime.protocol.messages import (
    KINDS,
    PROTOCOL_VERSION,
    ControlRequest,
    InferRequest,
    PolicyInfo,
    PrefixFields,
    StatsSnapshot,
    TeleopRequest,
    TensorInfo,
    Timing,
)
from runtime.server.config import ServerConfig
from runtime.server.endpoints import resolve_endpoint
from runtime.server.history import ObservationHistory
from runtime.server.instance import InstanceLock, tcp_listener_pid
from runtime.server.queue import Job, RequestQueue
from runtime.server.rtc import PrefixInputs, prefix_inputs, refuse_on_policy_without
from runtime.server.security import (
    ServerCurve,
    apply_server_curve,
    check_endpoint_security,
    load_server_curve,
    needs_curve,
    start_authenticator,
)
from runtime.server.stats import StatsCollector
from runtime.server.tasks import TaskEncoder, task_error
from runtime.server.worker import InferenceWorker

log = logging.getLogger(__name__)

LOCAL_CLIENT = (-1, b"control-loop")  # the control loop's key in the observation history
POLL_MS = 50  # how often the I/O thread looks at the stop flag when idle
BATCH = 64  # messages taken from one socket before looking at the others
RCVHWM = 16  # per-client inbound messages buffered before TCP pushes back on the client
HEADER_SLACK = 64 * 1024
CLIENT_WINDOW_S = 60.0  # a client counts as connected this long after its last request
MAX_TRACKED_CLIENTS = 1024  # past this, clients not heard from within the window are forgotten
IPC_SOCKET_MODE = 0o660  # srw-rw----: the service's group (operators, the control loop) may connect


def auto_max_message_bytes(engine: Engine) -> int:
    return 2 * sum(spec.nbytes for spec in engine.manifest.inputs) + HEADER_SLACK


def policy_info(engine: Engine, max_message_bytes: int, queue_depth: int) -> PolicyInfo:
    m = engine.manifest
    return PolicyInfo(
        protocol_version=PROTOCOL_VERSION,
        server_version=__version__,
        policy_name=m.policy_name,
        # what a client sends: one frame of each observation, no noise (the server adds both)
        inputs=tuple(TensorInfo(s.name, s.dtype, tuple(s.shape), s.role) for s in m.observation_inputs),
        outputs=tuple(TensorInfo(s.name, s.dtype, tuple(s.shape), s.role) for s in m.outputs),
        action_output=m.action_output,
        chunk_length=m.chunk_length,
        action_names=tuple(m.action_names),
        control_rate_hz=m.control_rate_hz,
        engine=engine.info.to_json(),
        versions={
            "lerobot_runtime": __version__,
            "protocol": str(PROTOCOL_VERSION),
            "openvino": engine.info.openvino_version,
            "zmq": zmq.zmq_version(),
            **{k: str(v) for k, v in m.tools.items()},
        },
        kinds=KINDS,
        max_message_bytes=max_message_bytes,
        queue_depth=queue_depth,
        history_frames=m.observation_history,
        noise_inputs=tuple(s.name for s in m.noise_inputs),
        max_task_bytes=m.language.max_task_bytes if m.language is not None else 0,
        **_prefix_info(m),
    )


def _prefix_info(manifest: Manifest) -> dict[str, Any]:
    prefix = prefix_inputs(manifest)
    if prefix is None:
        return {}
    return {"prefix_steps": prefix.chunk_size, "max_delay": prefix.max_delay, "prefix_defaults": prefix.defaults}


def task_encoder(engine: Engine) -> TaskEncoder | None:
    """The bundle's tokenizer for a language policy (loaded once per engine), None for other policies."""
    if engine.manifest.language is None:
        return None
    return TaskEncoder(engine.manifest, engine.info.bundle)


class ControlHandler(Protocol):
    """Answers ``control.*`` and ``teleop.*`` requests on the I/O thread; must only set flags and read state."""

    def handle(self, request: ControlRequest | TeleopRequest, client: str) -> dict[str, Any]: ...


class PolicyServer:
    """Serve one engine on the configured endpoints. ``start()``, then ``stop()`` (or a ``with`` block)."""

    def __init__(
        self,
        engine: Engine | Callable[[], Engine] | None,
        config: ServerConfig | None = None,
        *,
        runtime_directory: Path | None = None,
        heartbeat: Heartbeat | None = None,
        remote: PolicyInfo | None = None,
    ) -> None:
        """``engine`` is a loaded engine, or a factory that ``start()`` calls on the worker thread.
        None, with ``remote``: no policy runs here (the daemon's loop asks one on another machine,
        whose ``hello`` ``remote`` is, its ``engine`` naming where); the server answers control,
        teleop, ping, stats and hello, and refuses ``infer`` naming the remote.
        ``heartbeat``: beaten by the inference worker per job and while idle (see runtime.liveness).

        The factory form is what the daemon uses: ``load_engine`` pins the calling thread to the
        inference CPUs, so it must run on the thread that will run inference, and the I/O thread,
        started from the caller's thread, stays off that set.
        """
        self.config = config if config is not None else ServerConfig()
        self._engine_or_factory = engine
        if engine is None and remote is None:
            raise ValueError("a server without an engine serves a remote policy's hello: give remote")
        self.remote = remote
        self.heartbeat = heartbeat
        self.endpoints = [resolve_endpoint(ep, runtime_directory) for ep in self.config.endpoints]
        self.curve: ServerCurve | None = load_server_curve(self.config.curve)
        check_endpoint_security(self.endpoints, self.curve)
        self.bound_endpoints: list[str] = []
        self.stats = StatsCollector()
        self.queue = RequestQueue(self.config.queue_depth, self.config.latest_observation_wins)
        self._context: Any = None
        self._auth: Any = None
        self._routers: list[Any] = []
        self._pull: Any = None
        self._worker: InferenceWorker | None = None
        #: a language policy's tokenizer (set at start and on reload); None for other policies
        self.tasks: TaskEncoder | None = None
        self.prefix: PrefixInputs | None = None
        self._io: threading.Thread | None = None
        self._stop = threading.Event()
        self._deadline = math.inf
        self._accepting = True
        self._started = False
        # Every CPU this process may use, taken before a caller narrows its own thread to load an engine.
        self._all_cpus = set(os.sched_getaffinity(0))
        #: set by the daemon when it runs the control loop; None answers control.* with no_control
        self.control: ControlHandler | None = None
        self.no_control_reason = (
            "this daemon does not drive an arm (arm.kind = none or control.enabled = false); "
            "control loops that own their arm use infer"
        )
        self._instance: InstanceLock | None = None
        self._clients: dict[bytes, float] = {}  # routing id -> last heard (I/O thread writes)
        # set by the daemon once it holds an arm: health, e-stop and temperatures for hello and stats
        self.arm_status: Callable[[], Mapping[str, Any]] | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bind every endpoint and start the I/O and worker threads; raises if a bind fails."""
        if self._started:
            raise RuntimeError("server already started")
        # before loading: a second daemon must not even load, let alone unlink the first one's sockets
        self._instance = InstanceLock.acquire(self.endpoints)
        try:
            self._start()
        except BaseException:
            self._release_instance()
            raise

    def _release_instance(self) -> None:
        if self._instance is not None:
            self._instance.release()
            self._instance = None

    def _start(self) -> None:
        self._context = zmq.Context()
        reply_endpoint = f"inproc://lerobot-runtime-replies-{id(self):x}"
        engine = self._engine_or_factory
        if engine is None:
            self._serve_no_policy()
        else:
            self._load(engine, reply_endpoint)
        try:
            if self.curve is not None:
                self._auth = start_authenticator(self._context, self.curve)
            self._pull = self._context.socket(zmq.PULL)
            self._pull.linger = 0
            self._pull.bind(reply_endpoint)
            for ep in self.endpoints:
                self._routers.append(self._bind(ep))
        except BaseException:
            self._close_sockets(0)
            self.queue.close()
            if self._worker is not None:
                self._worker.join()
            self._stop_context()
            raise
        if self._worker is not None:
            self._worker.serve()
        self._io = threading.Thread(target=self._io_loop, name="lerobot-runtime-io", daemon=True)
        self._started = True
        self._io.start()
        log.info(
            "serving %s on %s (queue %d, max message %d bytes)",
            self.info.policy_name if self._worker is not None else "control and teleop (the policy is remote)",
            ", ".join(self.bound_endpoints),
            self.config.queue_depth,
            self.max_message_bytes,
        )

    def _serve_no_policy(self) -> None:
        assert self.remote is not None
        self.max_message_bytes = self.config.max_message_bytes or HEADER_SLACK
        self.info = dataclasses.replace(
            self.remote, kinds=tuple(k for k in KINDS if k != "infer"), max_message_bytes=self.max_message_bytes
        )
        self._hello_body = self.info.to_wire()

    def _load(self, engine: Engine | Callable[[], Engine], reply_endpoint: str) -> None:
        self._worker = InferenceWorker(
            engine,
            self.queue,
            self.stats,
            self._context,
            reply_endpoint,
            self.heartbeat,
            self.config.canary_interval_s,
            self.config.noise_seed,
        )
        self._worker.start()
        try:
            self.engine = self._worker.wait_loaded()
        except BaseException:
            self.queue.close()
            self._worker.join()
            self._stop_context()
            raise
        # ZeroMQ's own I/O threads start with the context's first socket, which comes next: keep them
        # off the inference CPUs too, or they wait behind inference and slow it down.
        for cpu in sorted(self._all_cpus - set(self.engine.info.cpus)):
            self._context.set(zmq.THREAD_AFFINITY_CPU_ADD, cpu)
        self._observation_specs = self.engine.manifest.observation_inputs
        self._noise_names = {s.name for s in self.engine.manifest.noise_inputs}
        self.prefix = prefix_inputs(self.engine.manifest)
        try:
            self.tasks = task_encoder(self.engine)
        except BaseException:
            self.queue.close()
            self._worker.join()
            self._stop_context()
            raise
        self.history = ObservationHistory(self.engine.manifest, max_gap_s=self.config.history_max_gap_s)
        names = [s.name for s in self._observation_specs]
        for name in self.config.allow_non_finite:
            if name not in names:
                self.queue.close()
                self._worker.join()
                self._stop_context()
                from runtime.errors import ConfigError

                raise ConfigError(f"server.allow_non_finite: {name!r} is not an input of this policy ({names})")
        self.max_message_bytes = self.config.max_message_bytes or auto_max_message_bytes(self.engine)
        self.info = policy_info(self.engine, self.max_message_bytes, self.config.queue_depth)
        self._hello_body = self.info.to_wire()

    def _bind(self, endpoint: str) -> Any:
        sock = self._context.socket(zmq.ROUTER)
        sock.linger = 0
        sock.rcvhwm = RCVHWM
        sock.maxmsgsize = self.max_message_bytes
        try:
            if needs_curve(endpoint, self.curve):
                assert self.curve is not None
                apply_server_curve(sock, self.curve)
            if endpoint.startswith("tcp://") and endpoint.endswith((":*", ":0")):
                port = sock.bind_to_random_port(endpoint.rsplit(":", 1)[0])
                bound = f"{endpoint.rsplit(':', 1)[0]}:{port}"
            else:
                sock.bind(endpoint)
                bound = endpoint
                if endpoint.startswith("ipc://") and not endpoint.startswith("ipc://@"):
                    # connecting takes write permission: the owner's group may, others may not,
                    # whatever the umask the socket was made with
                    os.chmod(endpoint[len("ipc://") :], IPC_SOCKET_MODE)
        except zmq.ZMQError as e:
            sock.close(0)
            from runtime.errors import ConfigError, InstanceRunningError

            pid = tcp_listener_pid(endpoint) if e.errno == zmq.EADDRINUSE else None
            if pid is not None:
                raise InstanceRunningError(
                    f"server.endpoints: cannot bind {endpoint}: PID {pid} is listening there"
                    + (" (another lerobot-runtime?)" if pid != os.getpid() else "")
                ) from e
            raise ConfigError(f"server.endpoints: cannot bind {endpoint}: {e}") from e
        except BaseException:  # chmod, CURVE set-up: an open socket left behind would hang Context.term()
            sock.close(0)
            raise
        self.bound_endpoints.append(bound)
        return sock

    def stop(self, timeout: float = 5.0, force: Callable[[], bool] | None = None) -> None:
        """Stop taking infers, let queued ones finish for up to ``timeout`` s, then close everything.

        Requests still queued at the deadline are answered ``shutting_down``. ``timeout`` 0 is the
        forced path: nothing waits; ``force`` is polled while waiting (a second Ctrl-C).
        """
        if not self._started or self._io is None:
            return
        self._deadline = time.monotonic() + max(0.0, timeout)
        self._stop.set()
        give_up = self._deadline + 2.0
        while self._io.is_alive() and time.monotonic() < give_up:
            self._io.join(0.05)
            if force is not None and force():
                self._deadline = time.monotonic()  # the I/O thread cancels what is queued and exits
        if self._worker is not None:
            self._worker.join(0.5 if timeout > 0 else 0.0)
            if self._worker.is_alive():
                # An inference longer than the grace period: its thread keeps the context alive,
                # so terminating the context would hang; the process is about to exit anyway.
                log.error("inference still running at shutdown; leaving it behind")
                return
        if self._io.is_alive():
            log.error("I/O thread did not stop; leaving the ZeroMQ context open")
            return
        self._stop_context()
        self._release_instance()
        if self._worker is not None and self._worker.owns_engine and self._worker.engine is not None:
            self._worker.engine.close()  # made by our factory or a reload, so ours to release
        self._started = False

    def replace_engine(self, engine: Engine) -> None:
        """Serve ``engine`` (already loaded and parity-checked) from the next infer on.

        Its inputs and outputs must be the old engine's: clients were told them in ``hello`` and the
        queued observations were checked against them. Raises :class:`ConfigError` otherwise.
        """
        from runtime.errors import ConfigError

        if self._worker is None:
            from runtime.errors import ConfigError

            raise ConfigError("engine: this daemon's policy is remote ([policy] endpoint): it loads no bundle")
        old, new = self.engine.manifest, engine.manifest
        if (old.inputs, old.outputs, old.action_output) != (new.inputs, new.outputs, new.action_output):
            raise ConfigError(
                f"{engine.info.bundle}: its inputs or outputs differ from the running policy's "
                f"({[s.name for s in new.inputs]} -> {[s.name for s in new.outputs]}); restart to serve it"
            )
        assert self._worker is not None
        tasks = task_encoder(engine)  # a new bundle may bring another tokenizer
        self._worker.swap_engine(engine)
        self.engine = engine
        self.tasks = tasks
        self.prefix = prefix_inputs(new)
        self.info = policy_info(engine, self.max_message_bytes, self.config.queue_depth)
        self._hello_body = self.info.to_wire()

    def _stop_context(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._context is not None:
            self._context.term()
            self._context = None

    def __enter__(self) -> PolicyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._io is not None and self._io.is_alive()

    @property
    def worker_thread_id(self) -> int:
        """The OS thread id that runs inference (0 before it started)."""
        return (self._worker.native_id or 0) if self._worker is not None else 0

    @property
    def verification_failure(self) -> str | None:
        """Why the serving canary (or the rest of a staged parity gate) stopped trusting the engine, with
        the error size; None while healthy.

        Once set it stays set (infers are refused ``verification_failed``) until the policy is
        loaded again: a restart, or :meth:`replace_engine` (the daemon's reload).
        """
        return self._worker.verification_failure() if self._worker is not None else None

    @property
    def gate_pending(self) -> str | None:
        """While the rest of a staged parity gate runs (nothing is served until it passed): how far it
        is; None once it passed or failed, or for an engine loaded with its whole gate."""
        return self._worker.gate_pending if self._worker is not None else None

    def snapshot(self) -> StatsSnapshot:
        in_flight = self._worker.in_flight if self._worker is not None else 0
        snap = self.stats.snapshot(len(self.queue), self.queue.depth_max, self.queue.capacity, in_flight)
        now = time.monotonic()
        heard = list(self._clients.values())  # one C-level copy: safe against the I/O thread's writes
        canary = self._worker.canary if self._worker is not None else None
        snap = dataclasses.replace(
            snap,
            arm=dict(self.arm_status()) if self.arm_status is not None else None,
            clients=sum(1 for t in heard if now - t <= CLIENT_WINDOW_S),
            inference_cpus=dict(self._worker.cpu_samples) if self._worker is not None else {},
            engine=self.engine.info.to_json() if self._started and self._worker is not None else self._remote_engine(),
            verification=self._verification(canary),
        )
        return snap

    def _remote_engine(self) -> dict[str, Any]:
        return dict(self.remote.engine) if self.remote is not None else {}

    def _verification(self, canary: Any) -> dict[str, Any]:
        """The canary's state and, after a staged load, the parity gate's: what proves the policy now."""
        out: dict[str, Any] = canary.state.to_wire() if canary is not None else {}
        gate = self._worker.gate if self._worker is not None else None
        if gate is not None:
            failure = self._worker.gate_failure if self._worker is not None else None
            out["gate"] = {"passed": gate.passed, "runs": gate.runs, "done": gate.done, "failure": failure}
        return out

    # --- I/O thread --------------------------------------------------------------------------

    def _io_loop(self) -> None:
        # Keep socket I/O off the inference CPUs, so neither waits for the other to be scheduled.
        io_cpus = self._all_cpus - (set(self.engine.info.cpus) if self._worker is not None else set())
        if io_cpus:
            os.sched_setaffinity(0, io_cpus)
        poller = zmq.Poller()
        poller.register(self._pull, zmq.POLLIN)
        for sock in self._routers:
            poller.register(sock, zmq.POLLIN)
        try:
            while True:
                events = dict(poller.poll(POLL_MS))
                if self._pull in events:
                    self._forward_replies()
                for index, sock in enumerate(self._routers):
                    if sock in events:
                        self._receive(index, sock)
                if self._stop.is_set() and self._shutdown_step():
                    break
            self._forward_replies()
        except Exception:
            log.exception("I/O thread failed")
            # nothing answers clients any more: take no more work, and let the worker finish and end,
            # or stop() waits on it, leaves the context open and never closes the engine
            self._accepting = False
            self.queue.close()
        finally:
            linger = 0 if self._deadline <= time.monotonic() else 200
            self._close_sockets(linger)

    def _shutdown_step(self) -> bool:
        """One step of the graceful stop; True once the I/O thread may exit."""
        if self._accepting:
            self._accepting = False
            self.queue.close()
        worker = self._worker
        if worker is None or not worker.is_alive():
            return True
        if time.monotonic() >= self._deadline:
            for job in self.queue.cancel_pending():
                self._reply_job_error(job, "shutting_down", "the server stopped before running this request")
            return True
        return False

    def _close_sockets(self, linger: int) -> None:
        for sock in self._routers:
            sock.close(linger)
        self._routers = []
        if self._pull is not None:
            self._pull.close(0)
            self._pull = None

    def _forward_replies(self) -> None:
        while True:
            try:
                frames = self._pull.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            index = int.from_bytes(frames[0].bytes, "little")
            if index < len(self._routers):
                self._send(self._routers[index], frames[1:])

    def _send(self, sock: Any, frames: list[Any]) -> None:
        try:
            sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            # ROUTER drops for peers over their high-water mark; counted so it is not silent.
            self.stats.error("dropped")

    def _receive(self, index: int, sock: Any) -> None:
        for _ in range(BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            received_at = time.monotonic()
            self._heard(frames[0].bytes, received_at)
            # REQ clients put an empty delimiter after the routing id; a header is never empty.
            cut = 2 if len(frames) > 1 and len(frames[1]) == 0 else 1
            envelope = [f.bytes for f in frames[:cut]]
            self._handle(index, sock, envelope, [f.buffer for f in frames[cut:]], received_at)

    def _heard(self, client: bytes, now: float) -> None:
        self._clients[client] = now
        if len(self._clients) > MAX_TRACKED_CLIENTS:
            self._clients = {c: t for c, t in self._clients.items() if now - t <= CLIENT_WINDOW_S}

    def _handle(
        self, index: int, sock: Any, envelope: list[bytes], payload: list[memoryview], received_at: float
    ) -> None:
        kind: str | None = None
        rid: int | None = None
        try:
            request = decode_request(payload, self.max_message_bytes)
            kind, rid = request.kind, request.id
            self.stats.request(kind)
            if isinstance(request, InferRequest):
                if self._worker is None:
                    raise NoPolicyError(
                        f"infer: no policy runs in this daemon: its loop asks {self.info.engine.get('endpoint', '?')}; "
                        "send observations there",
                        request_id=rid,
                    )
                self._submit(index, sock, envelope, request, received_at)
                return
            body: dict[str, Any]
            if isinstance(request, (ControlRequest, TeleopRequest)):
                if self.control is None:
                    raise NoControlError(f"{kind}: {self.no_control_reason}", request_id=rid)
                body = self.control.handle(request, envelope[0].hex())
            elif kind == "ping":
                body = {"uptime_s": round(time.monotonic() - self.stats.started, 3)}
            elif kind == "hello":
                body = self._hello_body
                if self.arm_status is not None:
                    body = {**body, "arm": dict(self.arm_status())}
            else:
                body = self.snapshot().to_wire()
            header = encode_reply(kind, request.id, body, Timing(0.0, 0.0, (time.monotonic() - received_at) * 1e3))
            self.stats.ok()
            self._send(sock, [*envelope, header])
        except ServerError as e:
            log.debug(
                "request %s from client %s refused: %s", e.request_id if rid is None else rid, envelope[0].hex(), e
            )
            self._refuse(sock, envelope, kind, rid, e, received_at)
        except Exception as e:  # a bug answering one request must not end the I/O thread, and the daemon
            log.exception("%s request %s from client %s failed", kind or "undecoded", rid, envelope[0].hex())
            message = f"{kind or 'request'} failed in the server: {type(e).__name__}: {e} (the traceback is in its log)"
            self._refuse(sock, envelope, kind, rid, InternalError(message, request_id=rid), received_at)

    def _refuse(
        self, sock: Any, envelope: list[bytes], kind: str | None, rid: int | None, e: ServerError, received_at: float
    ) -> None:
        if kind is None:
            self.stats.request("invalid")
        self.stats.error(e.code)
        rid = e.request_id if rid is None else rid
        timing = Timing(0.0, 0.0, (time.monotonic() - received_at) * 1e3)
        self._send(sock, [*envelope, encode_error(kind, rid, e.info, timing)])

    def _submit(self, index: int, sock: Any, envelope: list[bytes], request: InferRequest, received_at: float) -> None:
        if not self._accepting:
            self._reply_error(
                sock, envelope, "infer", request.id, "shutting_down", "the server is stopping", received_at
            )
            return
        failure = self.verification_failure
        if failure is not None:
            self._reply_error(sock, envelope, "infer", request.id, "verification_failed", failure, received_at)
            return
        try:
            self._refuse_noise(request.observation)
            frame = validate_inputs(self._observation_specs, request.observation)
            check_finite(self._observation_specs, frame, self.config.allow_non_finite)
            language = self._language(request.task)
            prefix = self._prefix_arrays(request.rtc)
        except InputValidationError as e:  # answered bad_input by _handle; nothing is queued
            raise BadInputError(str(e), field=e.field, expected=e.expected, received=e.received) from None
        inputs = self.history.assemble(
            (index, envelope[0]), frame, received_at, reset=request.reset, language=language, prefix=prefix
        )
        job = Job(index, envelope, request.id, inputs, received_at)
        result = self.queue.put(job)
        if not result.accepted:
            cap = self.queue.capacity
            self.stats.error("busy")
            timing = Timing(0.0, 0.0, (time.monotonic() - received_at) * 1e3)
            info = ErrorInfo(
                "busy",
                f"inference queue is full ({cap} waiting); send the next observation instead",
                "(queue)",
                f"< {cap} queued",
                f"{cap} queued",
            )
            self._send(sock, [*envelope, encode_error("infer", request.id, info, timing)])
        elif result.superseded is not None:
            self._reply_job_error(
                result.superseded,
                "superseded",
                f"replaced by newer request {request.id} from the same client (latest observation wins)",
            )

    def _refuse_noise(self, observation: Mapping[str, Any]) -> None:
        # The task's tokens are the server's to make, from the task string, with the bundle's tokenizer.
        for spec in self.engine.manifest.inputs:
            if spec.role == "language" and spec.name in observation:
                raise InputValidationError(
                    f"input {spec.name!r}: the server tokenizes this policy's task itself; send the task "
                    "string (body.task), not its tokens",
                    field=spec.name,
                    expected="not sent (send task)",
                    received=f"{spec.name} sent",
                )
        # The prefix inputs are the server's to make, from the request's leftover and delay.
        for spec in self.engine.manifest.inputs:
            if spec.role in RTC_ROLES and spec.name in observation:
                raise InputValidationError(
                    f"input {spec.name!r}: the server makes this policy's real-time chunking inputs itself; send "
                    "the leftover actions as body.prefix and the delay as body.delay",
                    field=spec.name,
                    expected="not sent (send prefix and delay)",
                    received=f"{spec.name} sent",
                )
        # One source of sampling noise: the server's generator (seedable), never the network.
        for name in self._noise_names:
            if name in observation:
                raise InputValidationError(
                    f"input {name!r}: the server draws this policy's sampling noise per request "
                    "(server.noise_seed makes it reproducible); do not send it",
                    field=name,
                    expected="not sent",
                    received=f"{name} sent",
                )

    @property
    def takes_task(self) -> bool:
        """True for a language policy: every inference needs a task string (see :meth:`submit_local`)."""
        return self.engine.manifest.language is not None

    def _language(self, task: Any) -> tuple[Any, ...]:
        """The task's tokens and mask for a language policy, () for another; raises InputValidationError
        (field ``task``) for a missing, malformed or too long task, or a task sent to a policy without one."""
        tasks = self.tasks
        error = task_error(tasks is not None, task, tasks.max_bytes if tasks is not None else 0)
        if error is not None:
            raise error
        return tasks.encode(task) if tasks is not None else ()

    @property
    def takes_prefix(self) -> bool:
        """True for a policy with real-time chunking: requests may carry the previous chunk's leftover."""
        return self.engine.manifest.rtc is not None

    def _prefix_arrays(self, fields: PrefixFields | None) -> tuple[Any, ...]:
        """The prefix inputs for a real-time chunking policy, () for another; raises InputValidationError
        naming the field for a leftover, delay or setting this policy cannot take."""
        fields = fields or PrefixFields()
        prefix = self.prefix
        error = refuse_on_policy_without(fields) if prefix is None else prefix.error(fields)
        if error is not None:
            raise error
        return prefix.arrays(fields) if prefix is not None else ()

    def submit_local(
        self,
        inputs: list[Any],
        on_done: Callable[[Any, str | None], None],
        *,
        reset: bool = False,
        task: str | None = None,
        rtc: PrefixFields | None = None,
    ) -> bool:
        """Queue an inference for the control loop, ahead of network clients (the arm waits on it).

        ``inputs``: one observation, validated against ``manifest.observation_inputs`` and in that
        order; the server adds the loop's earlier frames and the sampling noise where the policy takes
        them (``reset``: this observation starts a new history). ``task``: the instruction, which a
        language policy (:attr:`takes_task`) needs with every call and any other policy refuses; a
        bad task is reported through ``on_done`` (``"bad_input: task: ..."``) before this returns
        True, and nothing is queued. ``rtc``: the plan's leftover and the delay (a policy with real-time
        chunking, :attr:`takes_prefix`), refused the same way as a task. ``on_done`` runs on the worker
        thread (or, for a refused task or prefix, on the caller's). Returns False when the server is not
        taking work.

        Each call is counted as an ``infer`` request, and each refusal as an error by its code, as for a
        network client; the stats also count them apart (``local_requests``, ``local_errors``).
        """
        self.stats.request("infer", local=True)
        if not self._accepting:
            self.stats.error("shutting_down", local=True)
            return False
        now = time.monotonic()
        try:
            language = self._language(task)
            prefix = self._prefix_arrays(rtc)
        except InputValidationError as e:
            self.stats.error("bad_input", local=True)
            on_done(None, f"bad_input: {e}")
            return True
        program_inputs = self.history.assemble(LOCAL_CLIENT, inputs, now, reset=reset, language=language, prefix=prefix)
        job = Job(-1, [b"control-loop"], 0, program_inputs, now, on_done)
        result = self.queue.put(job, front=True)
        if not result.accepted:  # the queue closed: the server is stopping
            self.stats.error("shutting_down", local=True)
        if result.superseded is not None and result.superseded.on_done is not None:
            self.stats.error("superseded", local=True)
            result.superseded.on_done(None, "superseded by a newer observation")
        return result.accepted

    def observe_local(self, inputs: list[Any], *, reset: bool = False, task: str | None = None) -> None:
        """Add the control loop's observation of this tick to its history, without an inference
        (a no-op for a policy that looks at one observation). Same ``inputs`` as :meth:`submit_local`;
        ``task`` is accepted for symmetry with it and not used: the history keeps observations, the
        task goes with each inference."""
        self.history.observe(LOCAL_CLIENT, inputs, time.monotonic(), reset=reset)

    def _reply_job_error(self, job: Job, code: str, message: str) -> None:
        if job.on_done is not None:
            self.stats.error(code, local=True)
            job.on_done(None, f"{code}: {message}")
            return
        self._reply_error(
            self._routers[job.socket_index],
            job.envelope,
            "infer",
            job.request_id,
            code,
            message,
            job.received_at,
        )

    def _reply_error(
        self,
        sock: Any,
        envelope: list[bytes],
        kind: str,
        rid: int,
        code: str,
        message: str,
        received_at: float,
    ) -> None:
        self.stats.error(code)
        waited = (time.monotonic() - received_at) * 1e3
        self._send(sock, [*envelope, encode_error(kind, rid, ErrorInfo(code, message), Timing(waited, 0.0, waited))])
