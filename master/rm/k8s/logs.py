"""Pod logs into detlab's task logs: one follower thread per running pod.

A follower reads the pod's log with follow=true and timestamps, and hands each HTTP chunk's
complete lines to the same writer as an agent's shipped lines (`ingest_agent_logs`, the pod's
node as the "agent"). A stream that breaks while the pod runs is reopened with sinceSeconds and
lines at or before the last timestamp seen are skipped, so a reconnect neither loses nor repeats
lines (Kubernetes' timestamps are nanosecond RFC 3339: ties within one are the residual risk).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kubernetes.client.rest import ApiException

if TYPE_CHECKING:
    from master.rm.k8s.cluster import KubernetesCluster

log = logging.getLogger("detlab.k8s")


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


def _age_s(ts: str) -> float:
    try:
        at = datetime.fromisoformat(ts.replace("Z", "+00:00")[:26] + "+00:00")
    except ValueError:
        return 3600.0
    return max(0.0, (datetime.now(UTC) - at).total_seconds())


class LogFollower:
    def __init__(self, kc: KubernetesCluster) -> None:
        self.kc = kc
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}  # pod name -> its follower
        self._by_alloc: dict[str, set[str]] = {}
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def follow(self, alloc_id: str, pod: str, node: str) -> None:
        with self._lock:
            if pod in self._threads:
                return
            t = threading.Thread(
                target=self._run, args=(alloc_id, pod, node), name=f"k8s-log-{pod}", daemon=True
            )
            self._threads[pod] = t
            self._by_alloc.setdefault(alloc_id, set()).add(pod)
        t.start()

    def drain(self, alloc_id: str, timeout: float) -> None:
        """Wait (bounded) until the allocation's followers have read their pods' output."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = [self._threads[p] for p in self._by_alloc.get(alloc_id, ())]
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            for p in self._by_alloc.pop(alloc_id, ()):
                self._threads.pop(p, None)

    def _write(self, alloc_id: str, node: str, lines: list[tuple[str, str]]) -> None:
        from master.services.trial.logs import ingest_agent_logs

        entries: list[dict[str, Any]] = [
            {"allocation_id": alloc_id, "line": text, "stream": "stdout", "timestamp": ts or None}
            for ts, text in lines
        ]
        with self.kc.app.app_context():
            ingest_agent_logs(node, entries)

    def _run(self, alloc_id: str, pod: str, node: str) -> None:
        last = ""
        for attempt in range(100):
            if self._stop.is_set():
                return
            kw: dict[str, Any] = {}
            if last:
                kw["since_seconds"] = int(_age_s(last)) + 2
            try:
                resp = self.kc.core.read_namespaced_pod_log(
                    pod,
                    self.kc.cfg.namespace,
                    follow=True,
                    timestamps=True,
                    _preload_content=False,
                    **kw,
                )
                buf = b""
                for chunk in resp.stream(65536):
                    lines, buf = split_lines(buf, chunk)
                    fresh = [(ts, t) for ts, t in lines if not (last and ts and ts <= last)]
                    if fresh:
                        last = max(last, *(ts for ts, _ in fresh))
                        self._write(alloc_id, node, fresh)
                if buf:
                    self._write(alloc_id, node, split_lines(buf, b"\n")[0])
                return  # the container's output ended
            except ApiException as e:
                if e.status in (400, 404):  # gone, or never started
                    return
                log.info("k8s: log of pod %s: API error %s; retrying", pod, e.status)
            except Exception as e:  # noqa: BLE001 - a broken stream: reopen it
                log.info("k8s: log of pod %s broke (%s); reopening", pod, e)
            self._stop.wait(min(5.0, 0.2 * (attempt + 1)))
