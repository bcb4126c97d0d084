"""Tasks: anything the cluster runs (Determined's task model). A trial is one task type, with its
searcher and metrics on top (services/trial/trials.py); a command is another
(services/task/commands.py).

Every task is born here through the state machine; every allocation's end comes through
`allocation_exited`, which frees the allocation's resources with its pool's resource manager and
hands the task-type specific meaning to the trial or command code.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from detlab.protocol import ExitCause
from master.auth import revoke_allocation_tokens
from master.context import master_state
from master.db import db, iso
from master.errors import NotFound
from master.models import Allocation, Experiment, Task, Trial, User
from master.notify import agent_key, notify_after_commit, preempt_key
from master.rm.registry import resource_manager
from master.services.task.allocations import (
    bump_allocation_generation,
    containers_of,
)
from master.services.transitions import born, set_allocation_state
from master.states import LIVE_ALLOCATION, AllocationState, TaskState, TaskType


def trial_task_id(experiment_id: int, request_id: str) -> str:
    """A trial's task id, as Determined forms it: `<experiment id>.<request id>`."""
    return f"{experiment_id}.{request_id}"


def create_trial_task(trial: Trial, exp: Experiment) -> Task:
    """The task of a new trial (caller flushed the trial, so it has its id)."""
    task = Task(
        id=trial_task_id(exp.id, trial.request_id),
        type=TaskType.TRIAL,
        state=TaskState.ACTIVE,
        owner_id=exp.owner_id,
        trial_id=trial.id,
        name=f"Trial {trial.id} (Experiment {exp.id})",
        preemptible=True,
    )
    db.session.add(task)
    db.session.flush()
    born("task", task.id, TaskState.ACTIVE, f"trial {trial.id} created")
    return task


def task_of_trial(trial_id: int) -> Task:
    task = db.session.execute(select(Task).where(Task.trial_id == trial_id)).scalar_one_or_none()
    if task is None:
        raise NotFound(f"trial {trial_id} has no task")
    return task


def get_task(task_id: str) -> Task:
    task = db.session.get(Task, task_id) if "\x00" not in task_id else None
    if task is None:
        raise NotFound(f"task {task_id!r} not found")
    return task


def task_exists(task_id: str) -> bool:
    return "\x00" not in task_id and db.session.get(Task, task_id) is not None


def task_pool(task: Task) -> str:
    """Where a task runs: a trial in its experiment's pool, other tasks in their own."""
    if task.trial_id is not None:
        trial = db.session.get(Trial, task.trial_id)
        assert trial is not None
        return trial.experiment.resource_pool
    return task.resource_pool or "default"


def live_allocation_of(task_id: str) -> Allocation | None:
    return db.session.execute(
        select(Allocation).where(
            Allocation.task_id == task_id, Allocation.state.in_(LIVE_ALLOCATION)
        )
    ).scalar_one_or_none()


def describe_exit(exit_code: int | None, error: str | None) -> str:
    if error and exit_code is not None:
        return f"exit code {exit_code}: {error}"
    return f"exit code {exit_code}" if exit_code is not None else (error or "unknown")


def allocation_exited(
    alloc: Allocation, exit_code: int | None, error: str | None, cause: ExitCause | None = None
) -> None:
    """Record an allocation's end, free what it held, and decide what it means for its task.
    Caller holds the state lock."""
    if alloc.state == AllocationState.TERMINATED:
        return
    alloc.exit_code = exit_code
    alloc.exit_reason = error or alloc.exit_reason
    alloc.exit_cause = cause or alloc.exit_cause
    set_allocation_state(alloc, AllocationState.TERMINATED, describe_exit(exit_code, error))
    resource_manager(task_pool(alloc.task)).release(alloc)
    bump_allocation_generation()
    revoke_allocation_tokens(alloc.id)
    master_state().rendezvous.forget(alloc.id)
    notify_after_commit(
        preempt_key(alloc.id),
        *(agent_key(a) for a in {alloc.agent_id, *(alloc.containers or {})} - {None, ""}),
    )
    if alloc.trial_id is not None:
        from master.services.trial.trials import trial_allocation_exited

        trial_allocation_exited(alloc, exit_code, error)
    else:
        from master.services.task.commands import command_exited

        command_exited(alloc)


def _allocation_json(alloc: Allocation | None) -> dict[str, Any] | None:
    if alloc is None:
        return None
    return {
        "id": alloc.id,
        "state": alloc.state.value,
        "agents": sorted(containers_of(alloc)),
        "exit_code": alloc.exit_code,
        "exit_reason": alloc.exit_reason,
    }


def _latest_allocations(task_ids: list[str]) -> dict[str, Allocation]:
    """Each task's newest allocation (one query)."""
    if not task_ids:
        return {}
    rows = db.session.execute(
        select(Allocation)
        .where(Allocation.task_id.in_(task_ids))
        .order_by(Allocation.created_at, Allocation.id)
    ).scalars()
    return {a.task_id: a for a in rows}


def _request_of(task: Task, trial: Trial | None) -> dict[str, Any]:
    """Slots, priority and pool: a trial's from its experiment, other tasks' from the task."""
    if trial is not None:
        exp = trial.experiment
        return {
            "slots": exp.conf.resources.slots_per_trial,
            "priority": exp.priority,
            "resource_pool": exp.resource_pool,
            "preemptible": task.preemptible,
            "experiment_id": exp.id,
        }
    return {
        "slots": task.slots,
        "priority": task.priority,
        "resource_pool": task.resource_pool,
        "preemptible": task.preemptible,
        "experiment_id": None,
    }


def task_json(
    task: Task, alloc: Allocation | None, owners: dict[int, str], trial: Trial | None = None
) -> dict[str, Any]:
    return {
        "id": task.id,
        "type": task.type.value,
        "state": task.state.value,
        "name": task.name,
        "owner": owners.get(task.owner_id) if task.owner_id is not None else None,
        "owner_id": task.owner_id,
        "trial_id": task.trial_id,
        **_request_of(task, trial),
        "exit_code": task.exit_code,
        "exit_reason": task.exit_reason,
        "created_at": iso(task.created_at),
        "ended_at": iso(task.ended_at) if task.ended_at else None,
        "allocation": _allocation_json(alloc),
        # Why a queued task waits, as the latest scheduling pass said.
        "waiting_for": master_state().scheduling.waiting_reasons.get(task.id),
        # A running notebook's, shell's or TensorBoard's idleness, as the latest idle check
        # (services/task/idle.py) judged it: null while in use, unknown, or for other types.
        "idle_since": _idle_since(task),
    }


def _idle_since(task: Task) -> str | None:
    if task.state != TaskState.ACTIVE:
        return None
    since = master_state().proxy.idle_since.get(task.id)
    return iso(datetime.fromtimestamp(since, UTC)) if since is not None else None


def _owners(tasks: list[Task]) -> dict[int, str]:
    ids = {t.owner_id for t in tasks if t.owner_id is not None}
    if not ids:
        return {}
    return dict(db.session.execute(select(User.id, User.username).where(User.id.in_(ids))).all())


def tasks_json(tasks: list[Task]) -> list[dict[str, Any]]:
    allocs = _latest_allocations([t.id for t in tasks])
    trial_ids = [t.trial_id for t in tasks if t.trial_id is not None]
    trials = (
        {
            t.id: t
            for t in db.session.execute(select(Trial).where(Trial.id.in_(trial_ids))).scalars()
        }
        if trial_ids
        else {}
    )
    owners = _owners(tasks)
    return [
        task_json(
            t, allocs.get(t.id), owners, trials.get(t.trial_id) if t.trial_id is not None else None
        )
        for t in tasks
    ]


def list_tasks(
    task_type: TaskType | None = None, *, active_only: bool = False, limit: int = 1000
) -> list[Task]:
    """Newest first."""
    q = select(Task).order_by(Task.created_at.desc(), Task.id.desc()).limit(limit)
    if task_type is not None:
        q = q.where(Task.type == task_type)
    if active_only:
        q = q.where(Task.state.in_((TaskState.ACTIVE, TaskState.STOPPING)))
    return list(db.session.execute(q).scalars())


def allocation_summaries(tasks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Determined's `GET /api/v1/tasks` shape: live allocation id -> its summary."""
    out = {}
    for t in tasks:
        alloc = t["allocation"]
        if alloc is None or alloc["state"] == AllocationState.TERMINATED:
            continue
        out[alloc["id"]] = {
            "taskId": t["id"],
            "allocationId": alloc["id"],
            "name": t["name"],
            "registeredTime": t["created_at"],
            "resourcePool": t["resource_pool"],
            "slotsNeeded": t["slots"],
            "priority": t["priority"],
            "taskType": t["type"],
            "agents": alloc["agents"],
        }
    return out
