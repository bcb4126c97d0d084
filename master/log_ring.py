"""The master's own recent log records, kept in memory for `det master logs` (GET
/master/logs): a bounded ring, so a long-running master never grows with its logs."""

from __future__ import annotations

import logging
import threading
from collections import deque
from datetime import UTC, datetime

RING_SIZE = 10_000


class LogRing(logging.Handler):
    """A logging handler that keeps the last `size` records with increasing sequence numbers."""

    def __init__(self, size: int = RING_SIZE) -> None:
        super().__init__(level=logging.NOTSET)
        self._lock = threading.Lock()
        self._records: deque[dict] = deque(maxlen=size)
        self._seq = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
        except Exception:  # noqa: BLE001 - a bad format string must not break logging
            message = str(record.msg)
        with self._lock:
            self._seq += 1
            self._records.append(
                {
                    "seq": self._seq,
                    "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
                    "level": record.levelname,
                    "logger": record.name,
                    "message": message,
                }
            )

    def read(self, after: int = 0, tail: int | None = None, limit: int = 1000) -> list[dict]:
        """Records after sequence `after` (at most `limit`), or the last `tail` of them."""
        with self._lock:
            rows = [r for r in self._records if r["seq"] > after]
        if tail is not None:
            rows = rows[-tail:] if tail else []
        return rows[:limit]
