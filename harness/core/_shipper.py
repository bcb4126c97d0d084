"""The metrics hot path: `report()` appends to memory; one thread ships batches to the master.

Reports are sent in order, as many as are queued (up to `MAX_BATCH`) per request, right away when
something waits: while one request is in flight the next batch accumulates. A master outage is
ridden out with backoff; nothing is dropped except reports the master rejects as invalid (400),
which are isolated by bisection so their neighbours still arrive.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from harness.api import APIError, BadRequest, MasterUnreachable, Unauthenticated, retry_call
from harness.api.client import Client
from harness.core._jsonable import jsonable

logger = logging.getLogger("harness.core.metrics")

MAX_BATCH = 5000
BACKOFF_MAX = 10.0

# (group, steps_completed, metrics, unix time)
Report = tuple[str, int, dict[str, Any], float]


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="microseconds")


def encode(reports: list[Report]) -> bytes:
    """The request body. Plain floats/ints take the C encoder's fast path; only batches with
    NaN/inf or tensor-like values pay for the `jsonable` walk.

    `batch_id` makes a retry idempotent: if the master stored the batch but its answer was lost
    (say it restarted), the resent batch is recognised and not stored twice.
    """
    body = [
        {"group": g, "steps_completed": s, "metrics": m, "reported_at": _iso(t)}
        for g, s, m, t in reports
    ]
    batch_id = uuid.uuid4().hex
    try:
        return json.dumps(
            {"batch_id": batch_id, "reports": body}, allow_nan=False, separators=(",", ":")
        ).encode()
    except (TypeError, ValueError):
        for item in body:
            item["metrics"] = jsonable(item["metrics"])
        return json.dumps(
            {"batch_id": batch_id, "reports": body}, allow_nan=False, separators=(",", ":")
        ).encode()


class MetricsShipper:
    """Owns the queue and the shipping thread of one trial's metrics (and its progress)."""

    def __init__(
        self,
        client: Client,
        trial_id: int,
        on_orphaned: Callable[[str], None],
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._client = client
        self._trial_id = trial_id
        self._on_orphaned = on_orphaned
        self._max_batch = max_batch
        self._queue: collections.deque[Report] = collections.deque()
        self._lock = threading.Lock()
        self._done_cv = threading.Condition(threading.Lock())
        self._wake = threading.Event()
        self._enqueued = 0
        self._shipped = 0  # reports the master accepted or that were dropped for good
        self._progress: tuple[int, float] = (0, 0.0)  # (version, fraction), swapped atomically
        self._progress_sent = 0
        self._stopping = False
        self._dead = False
        self.dropped = 0
        self.requests = 0
        self._thread = threading.Thread(target=self._run, name="det-metrics", daemon=True)
        self._thread.start()

    # ---- training-loop side (never blocks, never does I/O) -----------------------------------
    def report(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        item = (group, steps_completed, dict(metrics), time.time())
        with self._lock:
            self._queue.append(item)
            self._enqueued += 1
        if not self._wake.is_set():
            self._wake.set()

    def set_progress(self, fraction: float) -> None:
        self._progress = (self._progress[0] + 1, float(fraction))
        if not self._wake.is_set():
            self._wake.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything reported so far reached the master; False on timeout."""
        with self._lock:
            target = self._enqueued
        progress = self._progress[0]
        self._wake.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done_cv:
            while not self._dead and (self._shipped < target or self._progress_sent < progress):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._done_cv.wait(timeout=left if left is not None else 1.0)
        return not self._dead or self._shipped >= target

    def close(self, timeout: float | None = None) -> bool:
        ok = self.flush(timeout)
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=5.0)
        return ok

    @property
    def pending(self) -> int:
        return self._enqueued - self._shipped

    # ---- shipping thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            try:
                while self._queue:
                    self._ship(self._take())
                version, value = self._progress
                if version > self._progress_sent:
                    self._send_progress(value)
                    self._progress_sent = version
            except Unauthenticated as e:
                self._die(e, orphaned=True)
                return
            except Exception as e:  # a bug here must not hang flush() forever
                logger.exception("the metrics shipper failed")
                self._die(e, orphaned=False)
                return
            with self._done_cv:
                self._done_cv.notify_all()
            if self._stopping and not self._queue:
                return

    def _take(self) -> list[Report]:
        batch: list[Report] = []
        popleft = self._queue.popleft
        n = min(len(self._queue), self._max_batch)
        for _ in range(n):
            batch.append(popleft())
        return batch

    def _ship(self, batch: list[Report]) -> None:
        try:
            payload = encode(batch)
        except (TypeError, ValueError) as e:
            if len(batch) == 1:
                self.dropped += 1
                logger.error("cannot encode metrics report %r: %s", batch[0][:3], e)
                self._mark_shipped(1)
                return
            mid = len(batch) // 2
            self._ship(batch[:mid])
            self._ship(batch[mid:])
            return
        try:
            self._retrying(lambda: self._client.report_metrics_raw(self._trial_id, payload))
        except BadRequest as e:
            if len(batch) == 1:
                self.dropped += 1
                logger.error("the master rejected a metrics report %r: %s", batch[0][:3], e)
            else:
                mid = len(batch) // 2
                self._ship(batch[:mid])
                self._ship(batch[mid:])
                return
        except Unauthenticated:
            raise
        except APIError as e:  # 403/404/409/413: retrying cannot help
            self.dropped += len(batch)
            logger.error("the master refused %d metrics reports: %s", len(batch), e)
        self._mark_shipped(len(batch))

    def _send_progress(self, value: float) -> None:
        tid = self._trial_id
        try:
            self._retrying(lambda: self._client.report_trial_progress(tid, value))
        except Unauthenticated:
            raise
        except APIError as e:
            logger.error("the master refused progress %.4f: %s", value, e)

    def _mark_shipped(self, n: int) -> None:
        with self._done_cv:
            self._shipped += n
            self._done_cv.notify_all()

    def _retrying(self, call: Callable[[], Any]) -> Any:
        """Call until it succeeds; back off while the master is unreachable or failing (5xx)."""

        def counted() -> Any:
            self.requests += 1
            return call()

        def on_retry(err: BaseException, delay: float, failures: int) -> None:
            reason = f"HTTP {err.status}: {err}" if isinstance(err, APIError) else str(err)
            logger.warning("metrics: %s; retrying in %.1fs", reason, delay)

        return retry_call(
            counted,
            retry_if=lambda e: (
                isinstance(e, MasterUnreachable) or (isinstance(e, APIError) and e.status >= 500)
            ),
            first=0.1,
            cap=BACKOFF_MAX,
            on_retry=on_retry,
        )

    def _die(self, err: Exception, orphaned: bool) -> None:
        with self._done_cv:
            self._dead = True
            self._done_cv.notify_all()
        if orphaned:
            self._on_orphaned(f"the master rejected this trial's session token ({err})")
