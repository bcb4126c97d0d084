"""Allocations: reserving slots for a trial, their containers, and asking them to stop.

An allocation's state changes only through `transitions.set_allocation_state`; what its ending
means for the trial is decided in `master.services.trials.allocation_exited`.
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
from master.models import Allocation, Slot, Trial
from master.notify import agent_key, hub, preempt_key, trial_key
from master.services.logs import write_master_line
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


def create_allocation(
    trial: Trial, placements: tuple[tuple[str, tuple[int, ...]], ...]
) -> Allocation:
    """Reserve the slots of every placement; one container per agent, ranked in order."""
    from master.services.supersede import supersede_for_resume

    chief, chief_slots = placements[0]
    supersede_for_resume(trial)  # what earlier runs reported past the resume point is re-done
    alloc = Allocation(
        id=str(uuid.uuid4()),
        trial_id=trial.id,
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
    bump_allocation_generation()
    for agent_id, slots in placements:
        if slots:
            db.session.execute(
                Slot.__table__.update()
                .where(Slot.agent_id == agent_id, Slot.index.in_(slots))
                .values(allocation_id=alloc.id)
            )
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
    return master_state().allocation_generation


def bump_allocation_generation() -> None:
    """Mark that allocations changed; the generation moves when this transaction commits.

    Moving it before the commit would let a concurrent reader cache the old state under the
    new generation.
    """
    db.session.info["det_alloc_changed"] = True


def after_commit(session: Session) -> None:
    """SQLAlchemy `after_commit` hook (registered by the app factory)."""
    if session.info.pop("det_alloc_changed", False):
        master_state().allocation_generation += 1
    for alloc_id in session.info.pop("det_revoked_allocations", ()):
        master_state().tokens.evict_allocation(alloc_id)


def request_preemption(alloc: Allocation, trial_id: int) -> bool:
    """Ask a live allocation to checkpoint and exit (caller commits). False if already asked."""
    if alloc.preempt_requested:
        return False
    alloc.preempt_requested = True
    alloc.preempt_requested_at = utcnow()
    db.session.flush()
    hub().notify(preempt_key(alloc.id), trial_key(trial_id))
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
            write_master_line(
                alloc.trial_id,
                alloc,
                f"trial did not stop within {timeout:g}s of the preemption signal; killing it",
            )
            woken.append(alloc)
        db.session.commit()
    for alloc in woken:
        hub().notify(preempt_key(alloc.id))
        for agent_id in containers_of(alloc):
            hub().notify(agent_key(agent_id))
