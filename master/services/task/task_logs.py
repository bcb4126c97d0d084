"""A non-trial task's log (a command's): read and follow by sequence number, like a trial's.

A trial's log keeps its shared tail (services/trial/logs.py); a command's is read straight from the
(task_id, id) index: few people follow one command at a time.
"""

from __future__ import annotations

from datetime import UTC

from sqlalchemy import select

from master.db import db, utcnow
from master.models import Task, TaskLog
from master.notify import hub, task_logs_key
from master.services.trial.logs import follow_page, read_lines
from master.states import TERMINAL_TASK


def read_task_logs(task_id: str, after: int, limit: int) -> list[dict]:
    return read_lines(TaskLog.__table__.c.task_id == task_id, after, limit)


def _ended(task_id: str) -> float | None:
    """Seconds since the task ended, None while it runs."""
    row = db.session.execute(select(Task.state, Task.ended_at).where(Task.id == task_id)).first()
    if row is None or row[0] not in TERMINAL_TASK:
        return None
    ended = row[1] or utcnow()
    ended = ended if ended.tzinfo else ended.replace(tzinfo=UTC)
    return (utcnow() - ended).total_seconds()


class _TaskLog:
    """A non-trial task's log, read straight from the (task_id, id) index."""

    def __init__(self, task_id: str, after: int, limit: int) -> None:
        self.task_id, self.after, self.limit = task_id, after, limit
        self.key = task_logs_key(task_id)
        # Taken before the first read: a line inserted meanwhile moves it, so no wake-up is lost.
        self.seen = hub().version(self.key)

    def read(self) -> list[dict]:
        return read_task_logs(self.task_id, self.after, self.limit)

    def ended_for(self) -> float | None:
        return _ended(self.task_id)

    def wait(self, seconds: float) -> None:
        hub().wait(self.key, self.seen, seconds)
        self.seen = hub().version(self.key)


def task_logs_page(task_id: str, after: int, limit: int, follow: bool, timeout: float) -> dict:
    """A task's lines after `after`, paged and followed like a trial's (logs.follow_page)."""
    return follow_page(_TaskLog(task_id, after, limit), after, follow, timeout)
