"""The inference worker: the one thread that owns the engine.

It takes jobs from the :class:`RequestQueue`, runs the engine and pushes finished replies over an
inproc socket to the I/O thread, the only thread that touches the ROUTER sockets.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from runtime.engine.base import Engine
from runtime.errors import InferenceError, InputValidationError
from runtime.protocol.codec import encode_actions_reply, encode_error
from runtime.protocol.errors import ErrorInfo
from runtime.protocol.messages import Timing
from runtime.server.queue import Job, RequestQueue
from runtime.server.stats import StatsCollector

log = logging.getLogger(__name__)


class InferenceWorker(threading.Thread):
    def __init__(
        self,
        engine: Engine,
        queue: RequestQueue,
        stats: StatsCollector,
        context: Any,
        reply_endpoint: str,
    ) -> None:
        super().__init__(name="lerobot-runtime-infer", daemon=True)
        self.engine = engine
        self.queue = queue
        self.stats = stats
        self._context = context
        self._reply_endpoint = reply_endpoint
        self._action_output = engine.manifest.action_output
        self.in_flight = 0

    def run(self) -> None:
        import zmq

        push = self._context.socket(zmq.PUSH)
        push.linger = 1000
        push.connect(self._reply_endpoint)
        try:
            while True:
                job = self.queue.get()
                if job is None:
                    break
                self.in_flight = 1
                try:
                    frames = self._run(job)
                finally:
                    self.in_flight = 0
                push.send_multipart([job.socket_index.to_bytes(2, "little"), *job.envelope, *frames])
        finally:
            push.close()

    def _run(self, job: Job) -> list[Any]:
        started = time.monotonic()
        queue_ms = (started - job.received_at) * 1e3
        try:
            outputs = self.engine.infer(job.observation)
            actions = outputs[self._action_output]
        except InputValidationError as e:
            return self._error(job, started, "bad_input", str(e), e.field)
        except InferenceError as e:
            reason = f"{e} ({e.backend_reason})" if e.backend_reason else str(e)
            return self._error(job, started, "inference_failed", reason, None)
        except Exception as e:
            log.exception("inference on request %d failed", job.request_id)
            return self._error(job, started, "internal", f"{type(e).__name__}: {e}", None)
        done = time.monotonic()
        timing = Timing(queue_ms, (done - started) * 1e3, (done - job.received_at) * 1e3)
        self.stats.infer_done(timing.queue_ms, timing.infer_ms, timing.total_ms)
        return encode_actions_reply(job.request_id, actions, timing)

    def _error(self, job: Job, started: float, code: str, message: str, field: str | None) -> list[Any]:
        done = time.monotonic()
        timing = Timing(
            (started - job.received_at) * 1e3, (done - started) * 1e3, (done - job.received_at) * 1e3
        )
        self.stats.error(code)
        where = f"observation.{field}" if field else None
        return [encode_error("infer", job.request_id, ErrorInfo(code, message, where), timing)]
