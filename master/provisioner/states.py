"""The instance state machine (pure): an enum, its transition table, one function to move it.

LAUNCHING: the row is written, the cloud call is in flight (a restarted master looks the launch
  up by its tag before doing anything else).
STARTING: the cloud has the instance; its agent has not connected yet.
RUNNING: its agent is connected.
TERMINATING: termination asked of the cloud (the join token is revoked at this point).
TERMINATED: gone. FAILED: the launch itself failed (see last_error).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class InstanceState(StrEnum):
    LAUNCHING = "LAUNCHING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED = "FAILED"


S = InstanceState
TRANSITIONS: dict[InstanceState, frozenset[InstanceState]] = {
    S.LAUNCHING: frozenset({S.STARTING, S.RUNNING, S.TERMINATING, S.TERMINATED, S.FAILED}),
    S.STARTING: frozenset({S.RUNNING, S.TERMINATING, S.TERMINATED}),
    S.RUNNING: frozenset({S.STARTING, S.TERMINATING, S.TERMINATED}),
    S.TERMINATING: frozenset({S.TERMINATED}),
    S.TERMINATED: frozenset(),
    S.FAILED: frozenset(),
}
LIVE = frozenset({S.LAUNCHING, S.STARTING, S.RUNNING})
ENDED = frozenset({S.TERMINATED, S.FAILED})


class IllegalInstanceTransition(Exception):
    pass


class HasState(Protocol):
    id: str
    state: str
    state_reason: str | None


def transition(instance: HasState, new: InstanceState | str, why: str) -> bool:
    """Move `instance` to `new`, recording why. False (and no change) when already there;
    IllegalInstanceTransition when the table forbids it."""
    src, dst = InstanceState(instance.state), InstanceState(new)
    if src == dst:
        return False
    if dst not in TRANSITIONS[src]:
        raise IllegalInstanceTransition(
            f"instance {instance.id} is {src.value}; it cannot become {dst.value} ({why})"
        )
    instance.state = dst.value
    instance.state_reason = why
    return True
