"""In-process wake-ups for long polls (agents waiting for work, log followers, preemption).

Versioned keys avoid the lost-wakeup race: read the version, check the database, then wait for
the version to move past what was read. That holds only if the version moves after the change
is committed: code inside a transaction wakes waiters with `notify_after_commit`, not `notify`.
"""

from __future__ import annotations

import threading
from collections import defaultdict


class Hub:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._versions: dict[str, int] = defaultdict(int)

    def version(self, key: str) -> int:
        with self._cond:
            return self._versions[key]

    def notify(self, *keys: str) -> None:
        with self._cond:
            for key in keys:
                self._versions[key] += 1
            self._cond.notify_all()

    def wait(self, key: str, seen: int, timeout: float) -> bool:
        """Wait until `key` moves past version `seen`; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._versions[key] != seen, timeout=timeout)


def notify_after_commit(*keys: str) -> None:
    """Wake the long polls waiting on `keys` once the caller's transaction commits (the
    `after_commit` hook in master/services/task/allocations.py fires them).

    A waiter woken before the commit re-reads the old rows, answers "nothing yet", and its next
    poll waits on a version that has already moved: the change was heard only at that poll's
    timeout (30 s for a trial's preemption poll, long enough for a paused trial to train to its
    end). A rolled-back change wakes them at the next commit: a spurious wake-up is harmless."""
    from master.db import db

    db.session.info.setdefault("det_notify", set()).update(keys)


def hub() -> Hub:
    """The current master's hub (per app: two masters in one process never wake each other)."""
    from master.context import master_state

    return master_state().hub


def agent_key(agent_id: str) -> str:
    return f"agent:{agent_id}"


def logs_key(trial_id: int) -> str:
    return f"logs:{trial_id}"


def task_logs_key(task_id: str) -> str:
    """A non-trial task's log lines (a trial's are `logs_key` of the trial)."""
    return f"tasklogs:{task_id}"


def task_key(task_id: str) -> str:
    """A task's state (for followers of a command's log)."""
    return f"task:{task_id}"


def preempt_key(allocation_id: str) -> str:
    return f"preempt:{allocation_id}"


def trial_key(trial_id: int) -> str:
    return f"trial:{trial_id}"
