"""Every entity's states and the transitions between them (pure: no I/O).

One enum and one transition table per entity. Nothing here writes: the only writers are the
functions in `master.services.transitions`, which check a change against these tables and record
why it happened. Experiment and trial share the same states; an ACTIVE trial is shown as QUEUED,
STARTING or RUNNING depending on its allocation (see `trial_display_state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

# The enums clients share live in detlab/ (one definition for the master, the SDK and the CLI).
from detlab.states import TERMINAL_STATES, TERMINAL_TASK_STATES
from detlab.states import State as State
from detlab.states import TaskState as TaskState
from detlab.states import TaskType as TaskType


class AllocationState(StrEnum):
    """An allocation is one attempt to run a trial on a set of slots."""

    ASSIGNED = "ASSIGNED"  # slots reserved, agent told to start
    RUNNING = "RUNNING"  # the agent reported the process/container running
    TERMINATED = "TERMINATED"  # it exited (see exit_code / exit_reason)


class AgentState(StrEnum):
    ACTIVE = "ACTIVE"  # polling; its slots are offered to the scheduler
    LOST = "LOST"  # stopped polling for `agent_timeout`; its allocations failed


class CheckpointState(StrEnum):
    """ACTIVE -> DELETING -> DELETED | DELETE_FAILED; a failed delete is retried. DELETED is set
    only after the files are gone, and is final."""

    ACTIVE = "ACTIVE"
    DELETING = "DELETING"
    DELETED = "DELETED"
    DELETE_FAILED = "DELETE_FAILED"


class InstanceState(StrEnum):
    """A cloud instance of an elastic pool (master/provisioner).

    LAUNCHING: the row is written, the cloud call is in flight (a restarted master looks the
      launch up by its tag before doing anything else).
    STARTING: the cloud has the instance; its agent has not connected yet.
    RUNNING: its agent is connected.
    TERMINATING: termination asked of the cloud (the join token is revoked at this point).
    TERMINATED: gone. FAILED: the launch itself failed (see last_error).
    """

    LAUNCHING = "LAUNCHING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED = "FAILED"


class ContainerState(StrEnum):
    """One agent's part of an allocation. Derived from the container's facts, never stored."""

    ASSIGNED = "ASSIGNED"
    RUNNING = "RUNNING"
    EXITED = "EXITED"


TERMINAL = TERMINAL_STATES
STOPPING = frozenset({State.STOPPING_COMPLETED, State.STOPPING_CANCELED, State.STOPPING_ERROR})
STOPPING_TO_TERMINAL = {
    State.STOPPING_COMPLETED: State.COMPLETED,
    State.STOPPING_CANCELED: State.CANCELED,
    State.STOPPING_ERROR: State.ERROR,
}
LIVE_ALLOCATION = (AllocationState.ASSIGNED, AllocationState.RUNNING)

# Legal transitions. A stopping state may be overtaken by a "stronger" stop (kill beats complete).
# A paused experiment may still be told to stop by its searcher (a trial that reported its last
# result while pausing) and then finishes like an active one.
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
        {
            State.ACTIVE,
            State.STOPPING_COMPLETED,
            State.STOPPING_CANCELED,
            State.STOPPING_ERROR,
            State.COMPLETED,
            State.CANCELED,
            State.ERROR,
        }
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

# `det experiment continue` (Determined 0.38's ContinueExperiment): the one way out of a terminal
# state. Kept apart from TRANSITIONS so no ordinary writer can revive an ended experiment or
# trial by mistake; only `transitions.continue_experiment_state`/`continue_trial_state` use it.
CONTINUE_TRANSITIONS: dict[State, frozenset[State]] = {
    State.COMPLETED: frozenset({State.ACTIVE}),
    State.CANCELED: frozenset({State.ACTIVE}),
    State.ERROR: frozenset({State.ACTIVE}),
}


def check_continue(kind: str, ident: int | str, state: State | str) -> None:
    """IllegalTransition (HTTP 409) naming the state unless `state` may be continued."""
    state = State(state)
    if state not in CONTINUE_TRANSITIONS:
        raise IllegalTransition(
            f"{kind} {ident} is {state.value}; only COMPLETED, CANCELED or ERROR {kind}s can be "
            "continued (wait until it ends, or pause and activate it)"
        )


ALLOCATION_TRANSITIONS: dict[AllocationState, frozenset[AllocationState]] = {
    AllocationState.ASSIGNED: frozenset({AllocationState.RUNNING, AllocationState.TERMINATED}),
    AllocationState.RUNNING: frozenset({AllocationState.TERMINATED}),
    AllocationState.TERMINATED: frozenset(),
}

AGENT_TRANSITIONS: dict[AgentState, frozenset[AgentState]] = {
    AgentState.ACTIVE: frozenset({AgentState.LOST}),
    AgentState.LOST: frozenset({AgentState.ACTIVE}),  # it polled again
}

CHECKPOINT_TRANSITIONS: dict[CheckpointState, frozenset[CheckpointState]] = {
    CheckpointState.ACTIVE: frozenset({CheckpointState.DELETING}),
    CheckpointState.DELETING: frozenset({CheckpointState.DELETED, CheckpointState.DELETE_FAILED}),
    CheckpointState.DELETE_FAILED: frozenset({CheckpointState.DELETING}),
    CheckpointState.DELETED: frozenset(),
}

_T = TaskState
TASK_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    _T.ACTIVE: frozenset({_T.STOPPING, _T.COMPLETED, _T.CANCELED, _T.ERROR}),
    _T.STOPPING: frozenset({_T.COMPLETED, _T.CANCELED, _T.ERROR}),
    _T.COMPLETED: frozenset(),
    _T.CANCELED: frozenset(),
    _T.ERROR: frozenset(),
}
# A continued trial's task comes back with it (see CONTINUE_TRANSITIONS).
TASK_CONTINUE_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    _T.COMPLETED: frozenset({_T.ACTIVE}),
    _T.CANCELED: frozenset({_T.ACTIVE}),
    _T.ERROR: frozenset({_T.ACTIVE}),
}
TERMINAL_TASK = TERMINAL_TASK_STATES

_I = InstanceState
INSTANCE_TRANSITIONS: dict[InstanceState, frozenset[InstanceState]] = {
    _I.LAUNCHING: frozenset({_I.STARTING, _I.RUNNING, _I.TERMINATING, _I.TERMINATED, _I.FAILED}),
    _I.STARTING: frozenset({_I.RUNNING, _I.TERMINATING, _I.TERMINATED}),
    _I.RUNNING: frozenset({_I.STARTING, _I.TERMINATING, _I.TERMINATED}),
    _I.TERMINATING: frozenset({_I.TERMINATED}),
    _I.TERMINATED: frozenset(),
    _I.FAILED: frozenset(),
}

# The states a new row of each entity may be born in (`transitions.born` checks and records it).
BIRTH_STATES: dict[str, frozenset[StrEnum]] = {
    "experiment": frozenset({State.ACTIVE, State.PAUSED}),
    "trial": frozenset({State.ACTIVE, State.PAUSED}),
    "task": frozenset({TaskState.ACTIVE}),
    "allocation": frozenset({AllocationState.ASSIGNED}),
    "agent": frozenset({AgentState.ACTIVE}),
    "checkpoint": frozenset({CheckpointState.ACTIVE}),
    # TERMINATING: an instance found in the cloud, tagged as ours, that no row launched (an
    # orphan): recorded only to be terminated.
    "instance": frozenset({InstanceState.LAUNCHING, InstanceState.TERMINATING}),
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


S = TypeVar("S", bound=StrEnum)


def check_in_table(
    table: Mapping[S, frozenset[S]], kind: str, ident: int | str, src: S, dst: S
) -> S:
    """`dst` when `src -> dst` is legal (or no change); IllegalTransition naming both otherwise."""
    if src == dst:
        return dst
    if dst not in table[src]:
        raise IllegalTransition(f"{kind} {ident} is {src.value}; it cannot become {dst.value}")
    return dst


def check_transition(kind: str, ident: int | str, src: State | str, dst: State | str) -> State:
    return check_in_table(TRANSITIONS, kind, ident, State(src), State(dst))


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


def terminal_for(state: State) -> State:
    """Where an idle trial ends when its experiment stops in `state` (a stopping state)."""
    return State.COMPLETED if STOPPING_TO_TERMINAL[state] == State.COMPLETED else State.CANCELED


def trial_display_state(
    state: State | str, allocation_state: str | None, unmanaged: bool = False
) -> str:
    state = State(state)
    if state != State.ACTIVE:
        return state.value
    if unmanaged:  # its script runs outside the cluster until it says it has ended
        return "RUNNING"
    if allocation_state is None or allocation_state == AllocationState.TERMINATED:
        return "QUEUED"
    if allocation_state == AllocationState.ASSIGNED:
        return "STARTING"
    return "RUNNING"


def container_state(container: Mapping[str, object]) -> ContainerState:
    """A container's state from its facts: it exited, it started, or it is still assigned.

    Rows written before the state was derived carry a "state" key; it is read as a fact too.
    """
    if container.get("exited") or container.get("state") == "EXITED":
        return ContainerState.EXITED
    if container.get("started_at") or container.get("state") == "RUNNING":
        return ContainerState.RUNNING
    return ContainerState.ASSIGNED
