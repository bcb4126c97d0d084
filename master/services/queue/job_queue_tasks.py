"""The job queue's rows for tasks that are not trials (commands, later notebooks and shells).

An experiment is one job however many trials it has; every other task is a job of its own, as
in Determined (`det job list` shows a command with its task id as the job id). These rows carry
the same keys as an experiment's job so that every listing (CLI, TUI, web) reads one shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from master.context import master_state
from master.db import db, iso
from master.models import Allocation, Task, User
from master.services.queue.scheduling import queued_commands
from master.states import LIVE_ALLOCATION, TaskState, TaskType

DEFAULT_PRIORITY = 42  # a command's request when its row has none (scheduling._command_request)


@dataclass(frozen=True)
class TaskJobs:
    """The non-trial tasks that queue or run, by pool."""

    queued: list[Task]
    running: list[Task]

    def in_pool(self, pool: str) -> list[tuple[Task, bool]]:
        """(task, running?) of one pool."""
        return [(t, False) for t in self.queued if task_job_pool(t) == pool] + [
            (t, True) for t in self.running if task_job_pool(t) == pool
        ]


def task_job_pool(task: Task) -> str:
    return task.resource_pool or "default"


def task_sort_key(task: Task) -> tuple[int, float, str]:
    """Priority, then submission: the order the priority scheduler gives a command's request."""
    return (task.priority or DEFAULT_PRIORITY, task.created_at.timestamp(), task.id)


def task_jobs() -> TaskJobs:
    live = (
        select(Allocation.task_id)
        .where(Allocation.state.in_(LIVE_ALLOCATION))
        .where(Allocation.trial_id.is_(None))
    )
    running = list(
        db.session.execute(
            select(Task).where(
                Task.type != TaskType.TRIAL,
                Task.state.in_((TaskState.ACTIVE, TaskState.STOPPING)),
                Task.id.in_(live),
            )
        ).scalars()
    )
    return TaskJobs(queued=queued_commands(), running=running)


def _last_ended(task_ids: list[str]) -> dict[str, Any]:
    """When each task's latest allocation ended (a preempted command waits from then)."""
    if not task_ids:
        return {}
    rows = db.session.execute(
        select(Allocation.task_id, func.max(Allocation.ended_at))
        .where(Allocation.task_id.in_(task_ids), Allocation.ended_at.is_not(None))
        .group_by(Allocation.task_id)
    ).all()
    return {tid: ended for tid, ended in rows if ended is not None}


def task_job_rows(members: list[tuple[Task, bool]]) -> dict[str, dict[str, Any]]:
    """One job row per task, keyed by task id (position is the caller's to set)."""
    owner_ids = {t.owner_id for t, _ in members if t.owner_id is not None}
    owners = (
        dict(db.session.execute(select(User.id, User.username).where(User.id.in_(owner_ids))).all())
        if owner_ids
        else {}
    )
    last = _last_ended([t.id for t, running in members if not running])
    reasons = master_state().scheduling.waiting_reasons
    rows = {}
    for task, running in members:
        slots = task.slots or 0
        rows[task.id] = {
            "job_id": task.id,
            "type": task.type.value,
            "task_id": task.id,
            "experiment_id": None,
            "experiment_state": None,
            "task_state": task.state.value,
            "name": task.name,
            "user": owners.get(task.owner_id) if task.owner_id is not None else None,
            "owner_id": task.owner_id,
            "state": "SCHEDULED" if running else "QUEUED",
            "priority": task.priority or DEFAULT_PRIORITY,
            "weight": 1.0,
            "resource_pool": task_job_pool(task),
            "preemptible": task.preemptible,
            "slots_requested": slots,
            "slots_held": slots if running else 0,
            "trials_queued": 0,
            "trials_running": 0,
            "submitted_at": iso(task.created_at),
            "waiting_since": None
            if running
            else iso(max(task.created_at, last.get(task.id, task.created_at))),
            "reason": None if running else reasons.get(task.id),
        }
    return rows
