"""The only writers of entity state: one function per entity.

Each checks the change against that entity's transition table in `master.states`, assigns it, and
records why in `state_changes` (in the caller's transaction, so the history commits or rolls back
with the change itself). An illegal change raises `IllegalTransition` and writes nothing.
Nothing else in the master assigns a `.state` (tests/unit/test_architecture.py checks).
"""

from __future__ import annotations

from collections.abc import Mapping

from master.db import db, utcnow
from master.models import (
    Agent,
    Allocation,
    Checkpoint,
    Experiment,
    Instance,
    StateChange,
    Trial,
)
from master.states import (
    AGENT_TRANSITIONS,
    ALLOCATION_TRANSITIONS,
    CHECKPOINT_TRANSITIONS,
    INSTANCE_TRANSITIONS,
    TRANSITIONS,
    AgentState,
    AllocationState,
    CheckpointState,
    InstanceState,
    S,
    State,
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
    # Rows written before checkpoints had a state machine said COMPLETED for a stored one.
    src = CheckpointState.ACTIVE if ckpt.state == "COMPLETED" else CheckpointState(ckpt.state)
    if not _move(CHECKPOINT_TRANSITIONS, "checkpoint", ckpt.uuid, src, dst, why):
        return False
    ckpt.state = dst.value
    ckpt.state_reason = why[:MAX_REASON]
    ckpt.state_changed_at = utcnow()
    return True


def set_instance_state(instance: Instance, dst: InstanceState, why: str) -> bool:
    """Move a cloud instance through its lifecycle; its latest reason stays on the row."""
    src = InstanceState(instance.state)
    if not _move(INSTANCE_TRANSITIONS, "instance", instance.id, src, dst, why):
        return False
    instance.state = dst.value
    instance.state_reason = why[:MAX_REASON]
    return True


def history(entity: str, ident: int | str) -> list[StateChange]:
    """Every recorded change of one entity, oldest first."""
    from sqlalchemy import select

    return list(
        db.session.execute(
            select(StateChange)
            .where(StateChange.entity == entity, StateChange.entity_id == str(ident))
            .order_by(StateChange.id)
        ).scalars()
    )
