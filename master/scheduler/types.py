"""The scheduler's inputs and outputs: plain frozen values, cheap to build from DB rows."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    """A queued trial that wants `slots` slots, all at once (gang) or none."""

    id: str  # the trial id, as a string
    job_id: str = ""  # the experiment; "" = a job of its own (the request id)
    slots: int = 1
    priority: int = 42  # lower runs first (1-99)
    order: float = 0.0  # FIFO key within a priority (submission time or manual queue position)
    pool: str = "default"
    weight: float = 1.0  # fair_share: the job's weight
    max_slots: int | None = None  # the JOB's cap on slots held at once (None = no cap)

    @property
    def job(self) -> str:
        return self.job_id or self.id


@dataclass(frozen=True)
class Running:
    """A trial holding slots now."""

    id: str
    job_id: str
    # (agent_id, slot indexes on that agent); one entry unless the gang spans agents.
    placements: tuple[tuple[str, tuple[int, ...]], ...]
    priority: int = 42
    order: float = 0.0
    pool: str = "default"
    weight: float = 1.0
    max_slots: int | None = None
    preemptible: bool = True
    # Already told to stop (preempted or paused) and not gone yet: its slots are about to be free.
    # The scheduler neither picks it again nor preempts more for slots it is about to free.
    preempting: bool = False

    @property
    def job(self) -> str:
        return self.job_id or self.id

    @property
    def slots(self) -> int:
        return sum(len(s) for _, s in self.placements)


@dataclass(frozen=True)
class AgentView:
    id: str
    pool: str
    free: tuple[int, ...]  # slot indexes free right now
    total: int  # enabled slots in all


@dataclass(frozen=True)
class PoolPolicy:
    type: str = "priority"  # "priority" | "fair_share"
    preemption: bool = False
    fitting_policy: str = "best"  # "best" | "worst"


@dataclass(frozen=True)
class Assignment:
    request_id: str
    # (agent_id, slot indexes on that agent); one entry unless the gang spans agents.
    placements: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass
class Decision:
    assignments: list[Assignment] = field(default_factory=list)
    # Running ids to preempt (send the preemption signal; the slots free up once they exit).
    preemptions: list[str] = field(default_factory=list)
    # request id -> why it is still waiting, for the queue view.
    waiting: dict[str, str] = field(default_factory=dict)
