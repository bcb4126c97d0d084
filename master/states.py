"""The one state machine for experiments and trials (pure: no I/O).

Experiment and trial share the same states. An ACTIVE trial is shown as QUEUED, STARTING or
RUNNING depending on its allocation (see `trial_display_state`).
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


TERMINAL = frozenset({State.COMPLETED, State.CANCELED, State.ERROR})
STOPPING = frozenset({State.STOPPING_COMPLETED, State.STOPPING_CANCELED, State.STOPPING_ERROR})
STOPPING_TO_TERMINAL = {
    State.STOPPING_COMPLETED: State.COMPLETED,
    State.STOPPING_CANCELED: State.CANCELED,
    State.STOPPING_ERROR: State.ERROR,
}

# Legal transitions. A stopping state may be overtaken by a "stronger" stop (kill beats complete).
TRANSITIONS: dict[State, frozenset[State]] = {
    State.ACTIVE: frozenset(
        {
            State.PAUSED,
            State.STOPPING_COMPLETED,
            State.STOPPING_CANCELED,
            State.STOPPING_ERROR,
            State.COMPLETED,
            State.CANCELED,
            State.ERROR,
        }
    ),
    State.PAUSED: frozenset(
        {State.ACTIVE, State.STOPPING_CANCELED, State.CANCELED, State.ERROR, State.STOPPING_ERROR}
    ),
    State.STOPPING_COMPLETED: frozenset(
        {State.COMPLETED, State.STOPPING_CANCELED, State.STOPPING_ERROR, State.ERROR}
    ),
    State.STOPPING_CANCELED: frozenset({State.CANCELED, State.ERROR}),
    State.STOPPING_ERROR: frozenset({State.ERROR}),
    State.COMPLETED: frozenset(),
    State.CANCELED: frozenset(),
    State.ERROR: frozenset(),
}

# The user-facing actions and which states they start from.
ACTIONS: dict[str, frozenset[State]] = {
    "pause": frozenset({State.ACTIVE}),
    "activate": frozenset({State.PAUSED}),
    "cancel": frozenset({State.ACTIVE, State.PAUSED}),
    "kill": frozenset(
        {State.ACTIVE, State.PAUSED, State.STOPPING_COMPLETED, State.STOPPING_CANCELED}
    ),
}


class IllegalTransition(Exception):
    """Raised for a transition the state machine forbids; the API answers 409 with the message."""


def can_transition(src: State | str, dst: State | str) -> bool:
    return State(dst) in TRANSITIONS[State(src)]


def check_transition(kind: str, ident: int | str, src: State | str, dst: State | str) -> State:
    src, dst = State(src), State(dst)
    if src == dst:
        return dst
    if dst not in TRANSITIONS[src]:
        raise IllegalTransition(f"{kind} {ident} is {src.value}; it cannot become {dst.value}")
    return dst


def check_action(kind: str, ident: int | str, state: State | str, action: str) -> None:
    """Raise IllegalTransition with a reason a person understands when `action` is not allowed."""
    allowed = ACTIONS[action]
    state = State(state)
    if state not in allowed:
        names = " or ".join(sorted(s.value for s in allowed))
        raise IllegalTransition(
            f"{kind} {ident} is {state.value}; only {names} {kind}s can be {_past(action)}"
        )


def _past(action: str) -> str:
    return {"pause": "paused", "activate": "activated", "cancel": "canceled", "kill": "killed"}[
        action
    ]


def is_terminal(state: State | str) -> bool:
    return State(state) in TERMINAL


class AllocationState(StrEnum):
    """An allocation is one attempt to run a trial on a set of slots."""

    ASSIGNED = "ASSIGNED"  # slots reserved, agent told to start
    RUNNING = "RUNNING"  # the agent reported the process/container running
    TERMINATED = "TERMINATED"  # it exited (see exit_code / exit_reason)


def trial_display_state(state: State | str, allocation_state: str | None) -> str:
    state = State(state)
    if state != State.ACTIVE:
        return state.value
    if allocation_state is None or allocation_state == AllocationState.TERMINATED:
        return "QUEUED"
    if allocation_state == AllocationState.ASSIGNED:
        return "STARTING"
    return "RUNNING"
