"""The inference worker: the one thread that owns the engine.

It takes jobs from the :class:`RequestQueue`, runs the engine and pushes finished replies over an
inproc socket to the I/O thread, the only thread that touches the ROUTER sockets. With a
:class:`~runtime.liveness.Heartbeat` it beats before each job and while idle, so a run that hangs
inside the backend withholds the systemd watchdog. Between jobs it runs the serving canary
(:mod:`runtime.engine.canary`), since it alone may call the engine; once the canary has failed it
answers every job ``verification_failed`` without running it, until another engine is swapped in.
It also draws a generative policy's sampling noise for each job right before running it
(:class:`~runtime.server.history.NoiseSource`), so the draws follow the order the engine runs in.
After a staged load it first runs the parity gate's remaining replays, before its first job: a
failure there is answered like a failed canary.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.engine.affinity import current_cpu
from runtime.engine.base import Engine
from runtime.engine.canary import Canary
from runtime.engine.parity import PendingGate
from runtime.errors import InferenceError
from runtime.liveness import Heartbeat
from runtime.protocol.codec import encode_actions_reply, encode_error
from runtime.protocol.errors import ErrorInfo
from runtime.protocol.messages import Timing
from runtime.server.history import NoiseSource
from runtime.server.queue import Job, RequestQueue
from runtime.server.stats import StatsCollector

log = logging.getLogger(__name__)

REPLY_WAIT_MS = 100  # a reply the I/O thread has not taken in this long is dropped if the server is stopping


class InferenceWorker(threading.Thread):
    def __init__(
        self,
        engine: Engine | Callable[[], Engine],
        queue: RequestQueue,
        stats: StatsCollector,
        context: Any,
        reply_endpoint: str,
        heartbeat: Heartbeat | None = None,
        canary_interval_s: float = 0.0,
        noise_seed: int | None = None,
    ) -> None:
        super().__init__(name="lerobot-runtime-infer", daemon=True)
        self.heartbeat = heartbeat
        # idle beats well inside the deadline, so only a hung job can miss it
        self._idle_s = min(1.0, heartbeat.deadline_s / 4) if heartbeat is not None else None
        self._engine_or_factory = engine
        self.engine: Engine | None = None
        self.queue = queue
        self.stats = stats
        self._context = context
        self._reply_endpoint = reply_endpoint
        self._action_output = ""
        self.in_flight = 0
        # CPU -> inferences that ended there, the control loop's and the network's: where inference
        # really runs (the status command, metrics)
        self.cpu_samples: Counter[int] = Counter()
        self._loaded = threading.Event()
        self._go = threading.Event()
        self._load_error: BaseException | None = None
        self._next_engine: Engine | None = None
        self.owns_engine = not isinstance(engine, Engine)  # made by our factory: ours to close
        self._canary_interval_s = canary_interval_s
        self.canary: Canary | None = None
        self._noise_seed = noise_seed
        self.noise: NoiseSource | None = None  # set once the engine is loaded, when its policy takes noise
        # the rest of a staged parity gate, run before the first job, and why it failed (None: it did not)
        self.gate: PendingGate | None = None
        self.gate_failure: str | None = None

    def wait_loaded(self) -> Engine:
        """Block until the engine is loaded on this thread; re-raise the factory's exception."""
        self._loaded.wait()
        if self._load_error is not None:
            raise self._load_error
        assert self.engine is not None
        return self.engine

    def swap_engine(self, engine: Engine) -> None:
        """Run ``engine`` from the next job on; the worker closes the one it replaces (if it made it)."""
        self._next_engine = engine
        # A failed canary judged the old engine: every job from now on runs on the new one (taken
        # before each job), which gets a canary of its own when it is taken.
        self.canary = None

    def _take_next_engine(self) -> None:
        new, self._next_engine = self._next_engine, None
        if new is None:
            return
        old, self.engine = self.engine, new
        self.gate, self.gate_failure = None, None  # a reload passed its whole gate on the reload thread
        self._action_output = new.manifest.action_output
        self.canary = self._make_canary(new)  # a reload starts a fresh canary (and clears a failure)
        log.info("now serving %s (%s)", new.info.bundle, new.info.program)
        if old is not None and self.owns_engine:
            old.close()
        self.owns_engine = True

    def serve(self) -> None:
        """Start taking jobs (the sockets are open)."""
        self._go.set()

    def run(self) -> None:
        import zmq

        try:
            factory = self._engine_or_factory
            self.engine = factory if isinstance(factory, Engine) else factory()
            self._action_output = self.engine.manifest.action_output
            self.canary = self._make_canary(self.engine)
            # a reload keeps the generator: the new engine takes the same inputs (replace_engine checks)
            noise = NoiseSource(self.engine.manifest, self._noise_seed)
            self.noise = noise if noise.needed else None
        except BaseException as e:
            self._load_error = e
            return
        finally:
            self._loaded.set()
        self._finish_gate(self.engine)
        # A closed queue before serve() means start() failed after loading: nothing to run.
        while not self._go.wait(0.05):
            self._beat("waiting for the sockets")
            if self.queue.closed:
                return
        push = self._context.socket(zmq.PUSH)
        push.linger = 1000
        push.sndtimeo = REPLY_WAIT_MS
        push.connect(self._reply_endpoint)
        try:
            while True:
                self._beat("idle")
                job = self.queue.get(self._wait_s())
                if job is None:
                    self._take_next_engine()
                    if self.queue.closed:
                        job = self.queue.get(0.0)  # stopping: finish what is queued, then exit
                        if job is None:
                            break
                if job is not None:
                    self._take_next_engine()
                    self._beat(f"running request {job.request_id} from client {job.envelope[0].hex()}")
                    frames: list[Any] | None = None
                    self.in_flight = 1
                    try:
                        if job.on_done is not None:
                            self._run_local(job, job.on_done)
                        else:
                            frames = self._run(job)
                    finally:
                        self.in_flight = 0
                    if frames is not None:
                        self._hand_over(push, job, frames)
                # Checks run only here, between two jobs: a request waits for at most one of them.
                canary = self.canary
                if canary is not None and self.engine is not None and canary.due(idle=len(self.queue) == 0):
                    self._beat("canary check")
                    canary.check(self.engine)
        finally:
            push.close()

    def _hand_over(self, push: Any, job: Job, frames: list[Any]) -> None:
        """Give a reply to the I/O thread, or drop it if the I/O thread has closed its end at a stop.

        A PUSH whose PULL has gone blocks for ever: the worker would never end, the context could not
        be terminated and the engine would not be closed.
        """
        import zmq

        message = [job.socket_index.to_bytes(2, "little"), *job.envelope, *frames]
        while True:
            try:
                push.send_multipart(message)
                return
            except zmq.Again:
                if self.queue.closed:
                    log.warning(
                        "request %d from client %s finished after the server stopped answering; its reply is dropped",
                        job.request_id,
                        job.envelope[0].hex(),
                    )
                    return

    def _wait_s(self) -> float | None:
        """How long to wait for a job: until the next beat or the next canary check, if either."""
        due = self.canary.seconds_until_due() if self.canary is not None else None
        waits = [w for w in (self._idle_s, due) if w is not None]
        return min(waits) if waits else None

    def _make_canary(self, engine: Engine) -> Canary | None:
        if self._canary_interval_s <= 0:
            return None
        if engine.test_case is None:
            log.info(
                "canary off: the engine carries no verified test case (it was not loaded from a bundle "
                "through the parity gate)"
            )
            return None
        log.info(
            "canary on: the test case is replayed and checked every %g s between requests",
            self._canary_interval_s,
        )
        return Canary(engine.test_case, self._canary_interval_s)

    def _finish_gate(self, engine: Engine) -> None:
        """The parity gate's replays a staged load left: run here, before the first request is taken
        (requests wait in the queue meanwhile), so nothing is served before the whole gate passed."""
        gate = engine.pending_gate
        if gate is None:
            return
        self.gate = gate
        started, left = time.monotonic(), gate.runs - gate.passed
        result = gate.finish(self._beat)
        if result.ok:
            log.info(
                "parity gate passed: %s (the last %d in %.0f ms, before the first request)",
                result.describe(),
                left,
                (time.monotonic() - started) * 1e3,
            )
        else:
            self.gate_failure = f"the parity gate failed after the daemon was ready: {result.describe()}"
            log.error(
                "%s; every request is refused (verification_failed) until the policy is loaded again", self.gate_failure
            )

    @property
    def gate_pending(self) -> str | None:
        """While the inference worker runs the rest of a staged parity gate: how far it is; else None."""
        gate = self.gate
        if gate is None or gate.done:
            return None
        return f"the parity gate is still running: {gate.describe()}"

    def verification_failure(self) -> str | None:
        if self.gate_failure is not None:
            return self.gate_failure
        return self.canary.failure if self.canary is not None else None

    def _beat(self, doing: str) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat(doing)

    def _run(self, job: Job) -> list[Any]:
        started = time.monotonic()
        queue_ms = (started - job.received_at) * 1e3
        assert self.engine is not None
        failure = self.verification_failure()
        if failure is not None:
            return self._error(job, started, "verification_failed", failure, None)
        try:
            # the I/O thread validated and ordered the inputs before queueing them
            if self.noise is not None:
                self.noise.fill(job.inputs)
            outputs = self.engine.run_validated(job.inputs)
            actions = outputs[self._action_output]
        except InferenceError as e:
            reason = f"{e} ({e.backend_reason})" if e.backend_reason else str(e)
            return self._error(job, started, "inference_failed", reason, None)
        except Exception as e:
            log.exception("inference on request %d failed", job.request_id)
            return self._error(job, started, "internal", f"{type(e).__name__}: {e}", None)
        self.cpu_samples[current_cpu()] += 1
        done = time.monotonic()
        timing = Timing(queue_ms, (done - started) * 1e3, (done - job.received_at) * 1e3)
        self.stats.infer_done(timing.queue_ms, timing.infer_ms, timing.total_ms)
        return encode_actions_reply(job.request_id, actions, timing)

    def _run_local(self, job: Job, on_done: Callable[[np.ndarray | None, str | None], None]) -> None:
        """A job from the control loop: the chunk goes to its callback, not to a socket."""
        started = time.monotonic()
        assert self.engine is not None
        failure = self.verification_failure()
        if failure is not None:
            self.stats.error("verification_failed", local=True)
            on_done(None, f"verification_failed: {failure}")
            return
        try:
            if self.noise is not None:
                self.noise.fill(job.inputs)
            actions = self.engine.run_validated(job.inputs)[self._action_output]
        except InferenceError as e:
            self.stats.error("inference_failed", local=True)
            on_done(None, f"{e} ({e.backend_reason})" if e.backend_reason else str(e))
            return
        except Exception as e:
            log.exception("inference for the control loop failed")
            self.stats.error("internal", local=True)
            on_done(None, f"{type(e).__name__}: {e}")
            return
        self.cpu_samples[current_cpu()] += 1
        done = time.monotonic()
        self.stats.infer_done((started - job.received_at) * 1e3, (done - started) * 1e3, (done - job.received_at) * 1e3)
        on_done(actions, None)

    def _error(self, job: Job, started: float, code: str, message: str, field: str | None) -> list[Any]:
        done = time.monotonic()
        timing = Timing((started - job.received_at) * 1e3, (done - started) * 1e3, (done - job.received_at) * 1e3)
        self.stats.error(code)
        return [encode_error("infer", job.request_id, ErrorInfo(code, message, field), timing)]
