"""The agent resource manager: polling det-agents (the master's first and, so far, only RM).

Behaviour is what it was before the seam: the scheduling pass reads every ACTIVE agent's free
slots, the scheduler places gangs on them, and a placement books the slots (`slots.allocation_id`)
in the pass's transaction; agents find their work in their next poll
(`services/agent/agents.py`) and report starts, exits and log lines back, so `refresh` has nothing
to pull.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from detlab.protocol import IsolationMode
from master.db import db
from master.models import Agent, Allocation, Slot, Task
from master.notify import agent_key, notify_after_commit
from master.rm.base import AllocationStatus, Placements
from master.scheduler import AgentView
from master.services.task.allocations import (
    containers_of,
    live_containers,
    new_allocation,
    request_preemption,
    set_container,
)
from master.states import AgentState, AllocationState, TaskType


class AgentResourceManager:
    type = "agent"
    queues_itself = False

    def __init__(self, name: str) -> None:
        self.name = name

    def capacity(self, pools: set[str]) -> list[AgentView]:
        """Every ACTIVE agent of `pools` with its free slots (one query with their slots)."""
        agents = db.session.execute(
            select(Agent)
            .where(Agent.state == AgentState.ACTIVE, Agent.resource_pool.in_(pools))
            .options(selectinload(Agent.slots))
        ).scalars()
        return [
            AgentView(
                id=a.id,
                pool=a.resource_pool,
                free=tuple(s.index for s in a.slots if s.enabled and s.allocation_id is None),
                total=sum(1 for s in a.slots if s.enabled),
                only_uid=a.unix_uid if a.isolation == IsolationMode.OWN_USER else None,
            )
            for a in agents
        ]

    def start(self, task: Task, placements: Placements) -> Allocation:
        """Book the slots of every placement; the agents start their containers on their next
        poll (woken by the caller after its commit)."""
        alloc = new_allocation(task, placements)
        for agent_id, slots in placements:
            if slots:
                db.session.execute(
                    Slot.__table__.update()
                    .where(Slot.agent_id == agent_id, Slot.index.in_(slots))
                    .values(allocation_id=alloc.id)
                )
        return alloc

    def preempt(self, alloc: Allocation) -> bool:
        """A trial gets the preemption signal, checkpoints and exits; a task without a harness
        (a command) cannot checkpoint, so its containers are killed and it queues again."""
        if not request_preemption(alloc, alloc.trial_id):
            return False
        if alloc.task.type != TaskType.TRIAL:
            self._kill_containers(alloc)
        return True

    def kill(self, alloc: Allocation) -> None:
        alloc.kill_requested = True
        self._kill_containers(alloc)

    def _kill_containers(self, alloc: Allocation) -> None:
        for agent_id in live_containers(alloc):
            set_container(alloc, agent_id, kill=True)
        notify_after_commit(*(agent_key(a) for a in containers_of(alloc)))

    def status(self, alloc: Allocation) -> AllocationStatus:
        return AllocationStatus(
            running=alloc.state == AllocationState.RUNNING,
            exited=alloc.state == AllocationState.TERMINATED,
            exit_code=alloc.exit_code,
            error=alloc.exit_reason,
        )

    def refresh(self) -> None:
        return None  # agents push their reports and logs

    def release(self, alloc: Allocation) -> None:
        db.session.execute(
            Slot.__table__.update().where(Slot.allocation_id == alloc.id).values(allocation_id=None)
        )
