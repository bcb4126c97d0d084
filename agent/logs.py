"""Ships trial output to the master in batches.

One thread, one FIFO: every line leaves in the order it arrived, so the lines of one allocation
keep their order. Batching (every 100 ms or 1000 lines) keeps a chatty trial from costing one
request per line. The buffer is bounded: when the master is away for long, the oldest lines go
first and the user gets one line saying how many were lost, instead of the agent running out of
memory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from agent.client import Backoff, is_transient, is_unavailable
from harness.api import Forbidden, Unauthenticated

log = logging.getLogger(__name__)

LogLine = dict[str, Any]
# A batch the master answers with an internal error this many times in a row is split in two,
# and a single line that still fails is dropped: one line the master cannot store must never
# hold back every later line of the agent (the master replaces NUL with U+FFFD; this is the net).
POISON_TRIES = 3


class LogClient(Protocol):
    def ship_logs(self, lines: list[LogLine]) -> None: ...

    def log_tail(self, allocation_id: str, limit: int = 2000) -> list[LogLine]: ...


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class LogShipper:
    """Collects `add()`ed lines and POSTs them in order from a background thread."""

    def __init__(
        self,
        client: LogClient,
        *,
        max_lines: int = 200_000,
        batch_lines: int = 1000,
        flush_interval: float = 0.1,
    ) -> None:
        self.client = client
        self.max_lines = max_lines
        self.batch_lines = batch_lines
        self.flush_interval = flush_interval
        self._buf: deque[LogLine] = deque()
        self._dropped: dict[str, int] = {}  # allocation_id -> lines dropped since last notice
        self._inflight = 0  # lines taken from the buffer and not yet shipped (or given up)
        self._flushing = 0
        self._closed = False
        self._stop = threading.Event()  # wakes a retry pause at close, and only then
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)
        self.shipped = 0  # lines delivered, for tests and the curious
        self.poisoned = 0  # single lines dropped because the master kept failing on them
        self._listeners: list[Callable[[list[LogLine]], None]] = []

    # -- what runtimes may ask of the shipper (agent.runtime.LogDelivery) --

    def on_delivered(self, listener: Callable[[list[LogLine]], None]) -> None:
        """Call `listener(batch)` after each batch the master accepted (in shipping order)."""
        self._listeners.append(listener)

    def stored_tail(self, allocation_id: str, limit: int = 2000) -> list[LogLine]:
        """The newest lines the master stored for an allocation from this agent, oldest first."""
        return self.client.log_tail(allocation_id, limit)

    def start(self) -> LogShipper:
        self._thread.start()
        return self

    def add(self, allocation_id: str, stream: str, line: str, timestamp: str | None = None) -> None:
        """Queue one line; never blocks on the network."""
        entry = {
            "allocation_id": allocation_id,
            "timestamp": timestamp or now_iso(),
            "stream": stream,
            "line": line,
        }
        with self._cond:
            self._buf.append(entry)
            while len(self._buf) > self.max_lines:
                old = self._buf.popleft()
                aid = old["allocation_id"]
                self._dropped[aid] = self._dropped.get(aid, 0) + 1
            if len(self._buf) == 1 or len(self._buf) >= self.batch_lines:
                self._cond.notify_all()

    def pending(self) -> int:
        """Lines not yet delivered (buffered or in flight)."""
        with self._cond:
            return len(self._buf) + self._inflight

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every line added so far is delivered; False if `timeout` passed first."""
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(
                    lambda: not self._buf and not self._dropped and self._inflight == 0,
                    timeout,
                )
            finally:
                self._flushing -= 1

    def close(self, timeout: float = 5.0) -> bool:
        """Flush (up to `timeout`), then stop the thread. Returns whether everything went out."""
        ok = self.flush(timeout) if self._thread.is_alive() else not self.pending()
        with self._cond:
            self._closed = True
            self._stop.set()
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        return ok

    # -- the shipping thread --

    def _has_work(self) -> bool:
        return bool(self._buf or self._dropped)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._has_work() or self._closed)
                if self._closed:
                    return
                # Let a batch fill for up to flush_interval, unless it is full or someone flushes.
                deadline = time.monotonic() + self.flush_interval
                while (
                    len(self._buf) < self.batch_lines
                    and not self._flushing
                    and not self._closed
                    and (remaining := deadline - time.monotonic()) > 0
                ):
                    self._cond.wait(remaining)
                batch = self._take()
                self._inflight = len(batch)
            try:
                self._send(batch)
            finally:
                with self._cond:
                    self._inflight = 0
                    self._cond.notify_all()

    def _isolate(self, batch: list[LogLine], err: BaseException) -> None:
        """Ship the halves of a batch the master keeps failing on; drop a lone failing line."""
        if len(batch) == 1:
            self.poisoned += 1
            log.error(
                "the master keeps failing on one log line of allocation %s; dropping it: %s",
                batch[0].get("allocation_id"),
                err,
            )
            return
        half = len(batch) // 2
        self._send(batch[:half])
        self._send(batch[half:])

    def _take(self) -> list[LogLine]:
        batch: list[LogLine] = []
        for aid, n in self._dropped.items():
            batch.append(
                {
                    "allocation_id": aid,
                    "timestamp": now_iso(),
                    "stream": "stderr",
                    "line": f"[det-agent] {n} log lines were dropped: the agent's log buffer "
                    f"({self.max_lines} lines) filled up while the master was unreachable or slow",
                }
            )
        self._dropped.clear()
        while self._buf and len(batch) < self.batch_lines:
            batch.append(self._buf.popleft())
        return batch

    def _send(self, batch: list[LogLine]) -> None:
        backoff = Backoff()
        failing = False
        internal = 0  # consecutive answers that were the master failing on this very batch
        while True:
            try:
                self.client.ship_logs(batch)
            except Exception as e:
                if not is_transient(e) and not isinstance(e, OSError):
                    # A 401's text is advice for people (det user login); say it for agents.
                    why = (
                        "it refused this agent's token"
                        if isinstance(e, Unauthenticated | Forbidden)
                        else str(e)
                    )
                    log.error("the master refused %d log lines, dropping them: %s", len(batch), why)
                    return
                if is_unavailable(e) or isinstance(e, OSError):
                    internal = 0  # the master is away: nothing is wrong with the batch
                else:
                    internal += 1
                    if internal >= POISON_TRIES:
                        self._isolate(batch, e)
                        return
                if not failing:
                    log.warning("cannot ship logs (%s); will retry", e)
                    failing = True
                if self._stop.wait(backoff.next()):
                    return
                continue
            self.shipped += len(batch)
            for listener in self._listeners:
                try:
                    listener(batch)
                except Exception:  # bookkeeping must never break log shipping
                    log.exception("a delivery listener failed")
            return
