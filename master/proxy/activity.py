"""When each proxied task was last used (requests and WebSocket messages through the proxy).

Memory only: a master restart forgets it, which can only postpone an idle reap (a task with no
recorded activity counts from the master's start), never hasten one.
"""

from __future__ import annotations

import threading
import time


class ActivityBook:
    """task id -> wall-clock time of its last proxied byte, and its open WebSockets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._sockets: dict[str, int] = {}
        self.started = time.time()

    def touch(self, task_id: str, now: float | None = None) -> None:
        with self._lock:
            self._last[task_id] = time.time() if now is None else now

    def opened(self, task_id: str) -> None:
        with self._lock:
            self._sockets[task_id] = self._sockets.get(task_id, 0) + 1
            self._last[task_id] = time.time()

    def closed(self, task_id: str) -> None:
        with self._lock:
            left = self._sockets.get(task_id, 0) - 1
            if left > 0:
                self._sockets[task_id] = left
            else:
                self._sockets.pop(task_id, None)
            self._last[task_id] = time.time()

    def last(self, task_id: str) -> float:
        """Its last activity (the master's start when none was seen)."""
        with self._lock:
            return self._last.get(task_id, self.started)

    def open_sockets(self, task_id: str) -> int:
        with self._lock:
            return self._sockets.get(task_id, 0)

    def forget(self, task_id: str) -> None:
        with self._lock:
            self._last.pop(task_id, None)
            self._sockets.pop(task_id, None)
