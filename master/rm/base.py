"""The interface a pool's backend implements: modelled on `master/provisioner/provider.py`.

The pure scheduler (master/scheduler) stays the authority on gang, priority, fair share and
preemption for every RM whose `queues_itself` is False: the scheduling pass asks the RM for its
free capacity, runs the scheduler, and hands each assignment to `start` and each preemption to
`preempt`. An RM that queues on its own (a Slurm or PBS cluster) sets `queues_itself`; the pass then
hands it every request in the scheduler's order and leaves placing them to it.

How allocations' states, exits and logs come back is the RM's own business: polling agents push
them (`master/services/agent/agents.py`, `/agents/<id>/logs`); a pull-based RM would read them in
`refresh`. Either way they land through the same writers (`services/task/tasks.allocation_exited`,
`services/logs`), so what an exit means for a trial or a command is decided in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from master.models import Allocation, Task
    from master.scheduler import AgentView

Placements = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class AllocationStatus:
    """What the RM knows about one allocation: RUNNING or EXITED (with why), as the agents'
    `ReportedState` says it."""

    running: bool
    exited: bool
    exit_code: int | None = None
    error: str | None = None


class ResourceManager(Protocol):
    """One backend. The master holds one per configured resource manager (master/rm/registry)."""

    name: str
    type: str
    # True for a backend with its own queue (Slurm): the pure scheduler only orders for it.
    queues_itself: bool

    def capacity(self, pools: set[str]) -> list[AgentView]:
        """Free and total slots of `pools`, per node the scheduler may place on."""
        ...

    def start(self, task: Task, placements: Placements) -> Allocation:
        """Reserve the placements for a new allocation of `task` and have it started."""
        ...

    def preempt(self, alloc: Allocation) -> bool:
        """Ask an allocation to give its slots back; False when it was asked already."""
        ...

    def kill(self, alloc: Allocation) -> None:
        """Stop an allocation now (a user's kill)."""
        ...

    def status(self, alloc: Allocation) -> AllocationStatus:
        """The allocation's state and exit as the backend reported them."""
        ...

    def refresh(self) -> None:
        """Pull states, exits and logs from a backend that does not push them (no-op for
        agents, which report in their polls)."""
        ...

    def release(self, alloc: Allocation) -> None:
        """Clean up after an ended allocation: free its slots (caller holds the state lock)."""
        ...
