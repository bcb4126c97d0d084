"""Pod logs into detlab's task logs: a bounded set of followers (`log_followers` streams).

A follower reads the pod's log with follow=true and timestamps, and hands each HTTP chunk's
complete lines to the same writer as an agent's shipped lines (`ingest_agent_logs`, the pod's
node as the "agent"). Where to start is a `Mark`: the last stored line's timestamp and how many
lines were stored with exactly that timestamp. A follower starts from the mark of what the task
log already holds for (allocation, node) (a pod that outlived a master restart is not read again
from its start), and a stream that breaks is reopened with sinceSeconds from its own mark. Lines
before the mark's timestamp are skipped, of the lines at it the first `count` are skipped (a log
is in order, so those are the stored ones), so neither a reconnect nor a new master loses or
repeats a line, ties included.

(allocation, node) is the pod: an allocation has one container per node (`containers_of` is
keyed by node) and its Job's pods are pinned one per placed node, so no two pods of one
allocation share a node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kubernetes.client.rest import ApiException
from sqlalchemy import func, select
from urllib3.exceptions import ReadTimeoutError

from master.db import db

if TYPE_CHECKING:
    from master.rm.k8s.cluster import KubernetesCluster

log = logging.getLogger("detlab.k8s")

# While other pods wait for a stream, one is held this long; a silent stream ends after it.
SLICE_S = 10.0
MAX_ERRORS = 100  # a pod whose log fails this often is given up on (its API keeps failing)


def split_lines(buf: bytes, chunk: bytes) -> tuple[list[tuple[str, str]], bytes]:
    """(timestamp, text) of each complete line in buf + chunk, and the incomplete rest (pure)."""
    parts = (buf + chunk).split(b"\n")
    rest = parts.pop()
    out = []
    for raw in parts:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        ts, sep, line = text.partition(" ")
        out.append((ts, line) if sep and ts.endswith("Z") else ("", text))
    return out, rest


def parse_ts(ts: str) -> datetime | None:
    """A pod log's RFC 3339 timestamp at the task log's precision (microseconds: Kubernetes'
    nanoseconds are cut, as storing the line cuts them), or None."""
    if not ts:
        return None
    try:
        at = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Mark:
    """How far a pod's log has been stored: up to `at`, and `count` lines at exactly `at`."""

    at: datetime | None = None
    count: int = 0


def fresh_lines(lines: list[tuple[str, str]], mark: Mark) -> tuple[list[tuple[str, str]], Mark]:
    """The lines not stored yet, and the mark once they are (pure). A line without a timestamp
    cannot be placed: it is kept, and leaves the mark as it is."""
    out: list[tuple[str, str]] = []
    at, count = mark.at, mark.count
    ties_stored = mark.count  # of the lines at `mark.at`, the first ones are stored already
    for ts, text in lines:
        t = parse_ts(ts)
        if t is not None and at is not None:
            if t < at:
                continue
            if t == mark.at and ties_stored > 0:
                ties_stored -= 1
                continue
        out.append((ts, text))
        if t is not None:
            at, count = (at, count + 1) if t == at else (t, 1)
    return out, Mark(at, count)


def _age_s(at: datetime) -> float:
    return max(0.0, (datetime.now(UTC) - at).total_seconds())


@dataclass(eq=False)  # one per pod: compared by identity (queue removal)
class _Pod:
    """One pod whose log is followed: where it is, how far its log is stored."""

    alloc_id: str
    name: str
    node: str
    mark: Mark | None = None  # None: not read yet (the task log's mark is looked up first)
    errors: int = 0
    done: threading.Event = field(default_factory=threading.Event)


class LogFollower:
    """At most `max_streams` pod logs are streamed at once, one thread each; other pods wait in
    a queue. While pods wait, a stream is held for at most SLICE_S and then handed on: its pod
    goes to the back of the queue and is reopened from its mark later (its lines come late,
    never lost or twice). A silent stream also ends after SLICE_S (the read timeout), so a pod
    that prints nothing cannot hold a thread while others wait."""

    def __init__(self, kc: KubernetesCluster, max_streams: int) -> None:
        self.kc = kc
        self._max = max_streams
        self._lock = threading.Lock()
        self._pods: dict[str, _Pod] = {}  # pod name -> its follower state
        self._by_alloc: dict[str, set[str]] = {}
        self._queue: deque[_Pod] = deque()
        self._workers = 0
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def follow(self, alloc_id: str, pod: str, node: str) -> None:
        with self._lock:
            if pod in self._pods:
                return
            p = _Pod(alloc_id, pod, node)
            self._pods[pod] = p
            self._by_alloc.setdefault(alloc_id, set()).add(pod)
            self._queue.append(p)
            spawn = self._workers < self._max
            if spawn:
                self._workers += 1
        if spawn:
            threading.Thread(target=self._work, name="k8s-log", daemon=True).start()

    def drain(self, alloc_id: str, timeout: float) -> None:
        """Wait (bounded) until the allocation's pods' output has been read."""
        deadline = time.monotonic() + timeout
        with self._lock:
            pods = [self._pods[p] for p in self._by_alloc.get(alloc_id, ())]
            for p in pods:  # ended pods first: their Job is deleted after this (bounded) wait
                if p in self._queue:
                    self._queue.remove(p)
                    self._queue.appendleft(p)
        for p in pods:
            p.done.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            for name in self._by_alloc.pop(alloc_id, ()):
                self._pods.pop(name, None)

    def _waiting(self) -> bool:
        with self._lock:
            return bool(self._queue)

    def _work(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    if not self._queue:
                        return
                    p = self._queue.popleft()
                if self._read(p):
                    p.done.set()
                    continue
                with self._lock:
                    self._queue.append(p)
        finally:
            with self._lock:
                self._workers -= 1

    def _read(self, p: _Pod) -> bool:
        """Stream the pod's log from its mark; True once its output has ended (or it is gone,
        or it failed too often), False when it is to be read on later."""
        try:
            if p.mark is None:
                p.mark = self._stored_mark(p.alloc_id, p.node)
            kw: dict[str, Any] = {}
            if p.mark.at is not None:
                kw["since_seconds"] = int(_age_s(p.mark.at)) + 2
            resp = self.kc.core.read_namespaced_pod_log(
                p.name,
                self.kc.cfg.namespace,
                follow=True,
                timestamps=True,
                _preload_content=False,
                _request_timeout=(10.0, SLICE_S),
                **kw,
            )
            try:
                return self._stream(p, resp)
            finally:
                resp.close()  # not reused: the stream may be cut mid-body
                resp.release_conn()
        except ReadTimeoutError:  # silent for SLICE_S: read on later
            return False
        except ApiException as e:
            if e.status in (400, 404):  # gone, or never started
                return True
            log.info("k8s: log of pod %s: API error %s; retrying", p.name, e.status)
        except Exception as e:  # noqa: BLE001 - a broken stream (or database): reopen it
            log.info("k8s: log of pod %s broke (%s); reopening", p.name, e)
        p.errors += 1
        self._stop.wait(min(5.0, 0.2 * p.errors))
        return p.errors >= MAX_ERRORS

    def _stream(self, p: _Pod, resp: Any) -> bool:
        assert p.mark is not None
        until = time.monotonic() + SLICE_S
        buf = b""
        for chunk in resp.stream(65536):
            lines, buf = split_lines(buf, chunk)
            p.mark = self._write_fresh(p.alloc_id, p.node, lines, p.mark)
            if time.monotonic() > until and self._waiting():
                return False  # others wait: the incomplete rest is read again from the mark
        if buf:
            p.mark = self._write_fresh(p.alloc_id, p.node, split_lines(buf, b"\n")[0], p.mark)
        return True  # the container's output ended

    def _write(self, alloc_id: str, node: str, lines: list[tuple[str, str]]) -> None:
        from master.services.trial.logs import ingest_agent_logs

        entries: list[dict[str, Any]] = [
            {"allocation_id": alloc_id, "line": text, "stream": "stdout", "timestamp": ts or None}
            for ts, text in lines
        ]
        with self.kc.app.app_context():
            ingest_agent_logs(node, entries)

    def _write_fresh(
        self, alloc_id: str, node: str, lines: list[tuple[str, str]], mark: Mark
    ) -> Mark:
        """Store the lines past `mark`; the mark moves only once they are stored (a write that
        fails leaves them to the reopened stream)."""
        fresh, after = fresh_lines(lines, mark)
        if fresh:
            self._write(alloc_id, node, fresh)
        return after

    def _stored_mark(self, alloc_id: str, node: str) -> Mark:
        """What the task log holds of this pod already (a master before this one followed it)."""
        from master.models import Allocation, TaskLog

        with self.kc.app.app_context():
            alloc = db.session.get(Allocation, alloc_id)
            if alloc is None:
                return Mark()
            owner = (
                TaskLog.trial_id == alloc.trial_id
                if alloc.trial_id is not None
                else TaskLog.task_id == alloc.task_id
            )
            row = db.session.execute(
                select(TaskLog.timestamp, func.count())
                .where(
                    owner,
                    TaskLog.allocation_id == alloc_id,
                    TaskLog.agent_id == node,
                    TaskLog.stream.in_(("stdout", "stderr")),
                )
                .group_by(TaskLog.timestamp)
                .order_by(TaskLog.timestamp.desc())
                .limit(1)
            ).first()
            db.session.rollback()  # a read: end its transaction
        if row is None:
            return Mark()
        at = row[0] if row[0].tzinfo is not None else row[0].replace(tzinfo=UTC)
        return Mark(at, int(row[1]))
