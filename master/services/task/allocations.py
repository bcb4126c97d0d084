"""Allocations: one run of a task, its containers, and asking them to stop.

An allocation's state changes only through `transitions.set_allocation_state`; its slots are
booked and freed by its pool's resource manager (master/rm); what its ending means for its task
is decided in `master.services.task.tasks.allocation_exited`.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from flask import current_app
from sqlalchemy import select
from sqlalchemy.orm import Session

from detlab.protocol import ExitCause
from master.context import master_state, state_lock
from master.db import db, utcnow
from master.errors import NotFound
from master.models import Allocation, Task, Trial
from master.notify import agent_key, hub, notify_after_commit, preempt_key, trial_key
from master.services.trial.logs import write_line
from master.states import LIVE_ALLOCATION, AllocationState, ContainerState, container_state


def get_allocation(alloc_id: str) -> Allocation:
    alloc = db.session.get(Allocation, alloc_id)
    if alloc is None:
        raise NotFound(f"allocation {alloc_id} not found")
    return alloc


def wants_stop(alloc: Allocation) -> bool:
    """Whether the allocation's trial should stop: preemption or a kill asked, or it ended."""
    return (
        alloc.preempt_requested or alloc.kill_requested or alloc.state == AllocationState.TERMINATED
    )


def live_allocation(trial_id: int) -> Allocation | None:
    return db.session.execute(
        select(Allocation).where(
            Allocation.trial_id == trial_id, Allocation.state.in_(LIVE_ALLOCATION)
        )
    ).scalar_one_or_none()


def new_allocation(task: Task, placements: tuple[tuple[str, tuple[int, ...]], ...]) -> Allocation:
    """A new ASSIGNED allocation of `task`, one container per placement, ranked in order (its
    resource manager books the slots)."""
    from master.services.transitions import born
    from master.services.trial.supersede import supersede_for_resume

    chief, chief_slots = placements[0]
    trial = db.session.get(Trial, task.trial_id) if task.trial_id is not None else None
    if trial is not None:
        supersede_for_resume(trial)  # what earlier runs reported past the resume point is re-done
    alloc = Allocation(
        id=str(uuid.uuid4()),
        task_id=task.id,
        trial_id=task.trial_id,
        agent_id=chief,
        state=AllocationState.ASSIGNED,
        slot_indexes=list(chief_slots),
        containers={
            agent_id: {"rank": rank, "slots": list(slots)}
            for rank, (agent_id, slots) in enumerate(placements)
        },
    )
    db.session.add(alloc)
    db.session.flush()
    born("allocation", alloc.id, AllocationState.ASSIGNED, f"scheduled for task {task.id}")
    bump_allocation_generation()
    return alloc


def containers_of(alloc: Allocation) -> dict[str, dict]:
    """Per-agent containers; allocations from before migration 0003 had one on `agent_id`."""
    if alloc.containers:
        return alloc.containers
    legacy: dict[str, Any] = {"rank": 0, "slots": list(alloc.slot_indexes)}
    if alloc.state == AllocationState.RUNNING:
        legacy["started_at"] = (alloc.started_at or utcnow()).isoformat()
    return {alloc.agent_id or "": legacy}


def set_container(alloc: Allocation, agent_id: str, **changes: Any) -> dict[str, dict]:
    """Record facts about one agent's container (a new dict, so SQLAlchemy sees the change)."""
    containers = {k: dict(v) for k, v in containers_of(alloc).items()}
    containers.setdefault(agent_id, {"rank": 0, "slots": []}).update(changes)
    alloc.containers = containers
    return containers


def live_containers(alloc: Allocation) -> list[str]:
    return [
        a for a, c in containers_of(alloc).items() if container_state(c) != ContainerState.EXITED
    ]


def allocation_generation() -> int:
    """Moves whenever an allocation is created or ends (per app): cheap cache invalidation."""
    return master_state().scheduling.allocation_generation


def bump_allocation_generation() -> None:
    """Mark that allocations changed; the generation moves when this transaction commits.

    Moving it before the commit would let a concurrent reader cache the old state under the
    new generation.
    """
    db.session.info["det_alloc_changed"] = True


def after_commit(session: Session) -> None:
    """SQLAlchemy `after_commit` hook (registered by the app factory)."""
    if session.info.pop("det_alloc_changed", False):
        master_state().scheduling.allocation_generation += 1
    if keys := session.info.pop("det_notify", None):
        hub().notify(*keys)
    for alloc_id in session.info.pop("det_revoked_allocations", ()):
        master_state().tokens.evict_allocation(alloc_id)


def request_preemption(alloc: Allocation, trial_id: int | None = None) -> bool:
    """Ask a live allocation to checkpoint and exit (caller commits). False if already asked."""
    if alloc.preempt_requested:
        return False
    alloc.preempt_requested = True
    alloc.preempt_requested_at = utcnow()
    db.session.flush()
    trial_id = alloc.trial_id if trial_id is None else trial_id
    notify_after_commit(
        preempt_key(alloc.id), *([trial_key(trial_id)] if trial_id is not None else [])
    )
    return True


def enforce_preemption_timeouts() -> None:
    """A trial that ignores the preemption signal past the timeout is killed."""
    timeout = current_app.config["DET"].preemption_timeout
    cutoff = utcnow() - timedelta(seconds=timeout)
    with state_lock():
        allocs = db.session.execute(
            select(Allocation).where(
                Allocation.state.in_(LIVE_ALLOCATION),
                Allocation.preempt_requested.is_(True),
                Allocation.kill_requested.is_(False),
                Allocation.preempt_requested_at < cutoff,
                (Allocation.exit_cause.is_(None))
                | (Allocation.exit_cause != ExitCause.PREEMPTION_TIMEOUT),
            )
        ).scalars()
        woken = []
        for alloc in allocs:
            # Kill its containers, but as a preemption: the trial queues again afterwards.
            alloc.containers = {k: {**v, "kill": True} for k, v in containers_of(alloc).items()}
            alloc.exit_cause = ExitCause.PREEMPTION_TIMEOUT
            alloc.exit_reason = ExitCause.PREEMPTION_TIMEOUT.message
            write_line(
                alloc,
                f"{alloc.task.type.lower()} did not stop within {timeout:g}s of the preemption "
                "signal; killing it",
            )
            woken.append(alloc)
        db.session.commit()
    for alloc in woken:
        hub().notify(preempt_key(alloc.id))
        for agent_id in containers_of(alloc):
            hub().notify(agent_key(agent_id))


def harness_reported(alloc: Allocation) -> None:
    """The harness's first report (its preemption poll) makes an allocation RUNNING where the
    backend said only that the job started (`awaits_harness`: Slurm runs the batch script
    minutes before the trial may have imported torch, fetched its model or met its peers)."""
    if alloc.state != AllocationState.ASSIGNED:
        return
    if not any(c.get("awaits_harness") for c in containers_of(alloc).values()):
        return
    from master.services.transitions import set_allocation_state

    # The scheduler's tick may look at the same row: take it, then look again.
    db.session.refresh(alloc, with_for_update=True)
    if alloc.state == AllocationState.ASSIGNED:
        set_allocation_state(alloc, AllocationState.RUNNING, "its harness reported to the master")
        master_state().scheduling.waiting_reasons.pop(alloc.task_id, None)
        db.session.commit()
