"""Which agents run whose tasks: the pure filter behind "keep other users' tasks off agents that
cannot isolate them" (docs/security.md).

An agent that cannot switch Unix identities (an ordinary user without CAP_SETUID) runs only the
tasks of users linked to its own uid (`AgentView.only_uid`); it refuses the others at start, so
placing them there would only fail them. Every other agent runs anyone's tasks. The rule is the
agent's own (`agent/identity.py`'s `plan`): the task's owner is linked to that uid or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from master.scheduler.types import AgentView, Request

_NAMED = 3  # agents named in a reason, at most


def runs_task_of(agent: AgentView, unix_uid: int | None) -> bool:
    """Whether `agent` runs a task whose owner is linked to `unix_uid` (None: not linked)."""
    return agent.only_uid is None or agent.only_uid == unix_uid


@dataclass(frozen=True)
class Eligible:
    """The agents of a pass that refuse one owner's tasks, and what the others hold."""

    refusing: tuple[str, ...]  # agent ids to hide from the owner's requests
    capacity: int  # enabled slots of the agents that run them
    largest: int  # the largest of those agents
    first: str | None  # some agent that runs them (None: none does)


def eligible_for(agents: Sequence[AgentView], unix_uid: int | None) -> Eligible:
    refusing: list[str] = []
    capacity = largest = 0
    first: str | None = None
    for a in agents:
        if runs_task_of(a, unix_uid):
            capacity += a.total
            largest = max(largest, a.total)
            first = first or a.id
        else:
            refusing.append(a.id)
    return Eligible(tuple(refusing), capacity, largest, first)


def owner_name(req: Request) -> str:
    return repr(req.owner) if req.owner else "an unknown user"


def nobody_runs(req: Request, agents: Sequence[AgentView], refusing: Sequence[str]) -> str:
    """Why no agent of the pool will ever run this request, and what would change that."""
    by_id = {a.id: a for a in agents}
    named = ", ".join(f"{i} (uid {by_id[i].only_uid})" for i in refusing[:_NAMED])
    more = f" and {len(refusing) - _NAMED} more" if len(refusing) > _NAMED else ""
    return (
        f"no agent in resource pool {req.pool!r} runs tasks of {owner_name(req)}: agent(s) "
        f"{named}{more} cannot isolate trials and run only tasks of users linked to their own "
        "Unix uid (link the user to it with `det user link-with-agent-user`, run the agent as "
        "root, or start it with --shared-unisolated)"
    )
