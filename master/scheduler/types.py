"""The scheduler's inputs and outputs: plain frozen values, cheap to build from DB rows."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    """A queued task that wants `slots` slots, all at once (gang) or none."""

    id: str  # the task id (a trial's `<experiment id>.<request id>`, a command's UUID)
    job_id: str = ""  # a trial's experiment; "" = a job of its own (the request id)
    slots: int = 1
    priority: int = 42  # lower runs first (1-99)
    order: float = 0.0  # FIFO key within a priority (submission time or manual queue position)
    # Within one order, later is newer: a trial's id (a job's trials share its order). Its own
    # field because `order + id * 1e-9` is lost to float rounding at epoch-second magnitudes, and
    # a trial's task id ends in a random UUID, so neither told which trial was newer.
    seq: int = 0
    pool: str = "default"
    weight: float = 1.0  # fair_share: the job's weight
    max_slots: int | None = None  # the JOB's cap on slots held at once (None = no cap)
    # Whose task it is, for agents that run only their own user's tasks (AgentView.only_uid):
    # the Unix uid its owner is linked to (None: not linked, or no owner) and the owner's name.
    unix_uid: int | None = None
    owner: str = ""

    @property
    def job(self) -> str:
        return self.job_id or self.id


@dataclass(frozen=True)
class Running:
    """A task holding slots now (its live allocation)."""

    id: str  # the task id
    job_id: str
    # (agent_id, slot indexes on that agent); one entry unless the gang spans agents.
    placements: tuple[tuple[str, tuple[int, ...]], ...]
    priority: int = 42
    order: float = 0.0
    seq: int = 0  # as Request.seq
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
    # None: it runs anyone's tasks (it isolates them, or its operator shares it on purpose).
    # Else it cannot isolate and runs only tasks whose owner is linked to this uid, its own.
    only_uid: int | None = None


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
