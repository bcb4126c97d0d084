"""The only writers of entity state: one function per entity.

Each checks the change against that entity's transition table in `master.states`, assigns it, and
records why in `state_changes` (in the caller's transaction, so the history commits or rolls back
with the change itself). An illegal change raises `IllegalTransition` and writes nothing.
Nothing else in the master assigns a `.state` (tests/unit/test_architecture.py checks).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from sqlalchemy import select

from master.db import db, utcnow
from master.models import (
    Agent,
    Allocation,
    Checkpoint,
    Experiment,
    Instance,
    StateChange,
    Task,
    Trial,
)
from master.states import (
    AGENT_TRANSITIONS,
    ALLOCATION_TRANSITIONS,
    BIRTH_STATES,
    CHECKPOINT_TRANSITIONS,
    CONTINUE_TRANSITIONS,
    INSTANCE_TRANSITIONS,
    TASK_CONTINUE_TRANSITIONS,
    TASK_TRANSITIONS,
    TERMINAL_TASK,
    TRANSITIONS,
    AgentState,
    AllocationState,
    CheckpointState,
    IllegalTransition,
    InstanceState,
    S,
    State,
    TaskState,
    check_in_table,
    is_terminal,
)

MAX_REASON = 1000


def _record(entity: str, ident: int | str, src: str | None, dst: str, why: str) -> None:
    db.session.add(
        StateChange(
            entity=entity,
            entity_id=str(ident),
            from_state=src,
            to_state=dst,
            reason=why[:MAX_REASON],
            at=utcnow(),
        )
    )


def _move(
    table: Mapping[S, frozenset[S]], kind: str, ident: int | str, src: S, dst: S, why: str
) -> bool:
    """Check `src -> dst` against `table` and record it; False when there is nothing to change.
    Each writer below then assigns the state and the fields that go with it."""
    check_in_table(table, kind, ident, src, dst)
    if src == dst:
        return False
    _record(kind, ident, src, dst, why)
    return True


def born(entity: str, ident: int | str, state: StrEnum, why: str) -> None:
    """Record a new row's first state (`from` None): every entity's history starts with its
    birth. The row itself is built with that state by its creator, which calls this once the row
    has its id (tests/unit/test_architecture.py checks that every creator does). A state an
    entity cannot start in raises IllegalTransition."""
    if state not in BIRTH_STATES[entity]:
        raise IllegalTransition(f"a new {entity} cannot start {state.value}")
    _record(entity, ident, None, state.value, why)


def set_experiment_state(exp: Experiment, dst: State, why: str) -> bool:
    """Move an experiment to `dst`; False (and nothing written) when it is already there."""
    if not _move(TRANSITIONS, "experiment", exp.id, State(exp.state), dst, why):
        return False
    exp.state = dst
    if is_terminal(dst):
        exp.ended_at = exp.ended_at or utcnow()
    return True


def set_trial_state(trial: Trial, dst: State, why: str) -> bool:
    """Move a trial to `dst`; a terminal state stamps `ended_at`."""
    if not _move(TRANSITIONS, "trial", trial.id, State(trial.state), dst, why):
        return False
    trial.state = dst
    if is_terminal(dst):
        trial.ended_at = trial.ended_at or utcnow()
        # The trial's task ends with it (trials from before tasks got theirs in migration 0011).
        task = db.session.execute(
            select(Task).where(Task.trial_id == trial.id)
        ).scalar_one_or_none()
        if task is not None:
            set_task_state(task, TaskState(dst.value), why)
    return True


def continue_experiment_state(exp: Experiment, why: str) -> None:
    """An ended experiment becomes ACTIVE again (`det experiment continue`): the only move out of
    a terminal state (states.CONTINUE_TRANSITIONS); `ended_at` is cleared."""
    if _move(CONTINUE_TRANSITIONS, "experiment", exp.id, State(exp.state), State.ACTIVE, why):
        exp.state = State.ACTIVE
        exp.ended_at = None


def continue_trial_state(trial: Trial, why: str) -> None:
    """An ended trial (and its task) becomes ACTIVE again, keeping its id, metrics and
    checkpoints; its restarts start from zero, as in Determined."""
    if _move(CONTINUE_TRANSITIONS, "trial", trial.id, State(trial.state), State.ACTIVE, why):
        trial.state = State.ACTIVE
        trial.ended_at = None
        trial.restarts = 0
    task = db.session.execute(select(Task).where(Task.trial_id == trial.id)).scalar_one_or_none()
    if task is not None and _move(
        TASK_CONTINUE_TRANSITIONS, "task", task.id, TaskState(task.state), TaskState.ACTIVE, why
    ):
        task.state = TaskState.ACTIVE
        task.ended_at = None
        task.exit_code = None
        task.exit_reason = None


def set_task_state(task: Task, dst: TaskState, why: str) -> bool:
    """Move a task; an ended one stamps `ended_at`."""
    if not _move(TASK_TRANSITIONS, "task", task.id, TaskState(task.state), dst, why):
        return False
    task.state = dst
    if dst in TERMINAL_TASK:
        task.ended_at = task.ended_at or utcnow()
    return True


def set_allocation_state(alloc: Allocation, dst: AllocationState, why: str) -> bool:
    src = AllocationState(alloc.state)
    if not _move(ALLOCATION_TRANSITIONS, "allocation", alloc.id, src, dst, why):
        return False
    alloc.state = dst
    if dst == AllocationState.RUNNING:
        alloc.started_at = alloc.started_at or utcnow()
    elif dst == AllocationState.TERMINATED:
        alloc.ended_at = utcnow()
    return True


def set_agent_state(agent: Agent, dst: AgentState, why: str) -> bool:
    if not _move(AGENT_TRANSITIONS, "agent", agent.id, AgentState(agent.state), dst, why):
        return False
    agent.state = dst
    return True


def set_checkpoint_state(ckpt: Checkpoint, dst: CheckpointState, why: str) -> bool:
    """Move a checkpoint through its deletion states; its latest reason stays on the row."""
    src = CheckpointState(ckpt.state)
    if not _move(CHECKPOINT_TRANSITIONS, "checkpoint", ckpt.uuid, src, dst, why):
        return False
    ckpt.state = dst
    ckpt.state_reason = why[:MAX_REASON]
    ckpt.state_changed_at = utcnow()
    return True


def set_instance_state(instance: Instance, dst: InstanceState, why: str) -> bool:
    """Move a cloud instance through its lifecycle; its latest reason stays on the row."""
    src = InstanceState(instance.state)
    if not _move(INSTANCE_TRANSITIONS, "instance", instance.id, src, dst, why):
        return False
    instance.state = dst
    instance.state_reason = why[:MAX_REASON]
    return True


def history(entity: str, ident: int | str) -> list[StateChange]:
    """Every recorded change of one entity, oldest first."""
    return list(
        db.session.execute(
            select(StateChange)
            .where(StateChange.entity == entity, StateChange.entity_id == str(ident))
            .order_by(StateChange.id)
        ).scalars()
    )
