"""The only writers of entity state: one function per entity.

Each checks the change against that entity's transition table in `master.states`, assigns it, and
records why in `state_changes` (in the caller's transaction, so the history commits or rolls back
with the change itself). An illegal change raises `IllegalTransition` and writes nothing.
Nothing else in the master assigns a `.state` (tests/unit/test_architecture.py checks).
"""

from __future__ import annotations

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


def set_experiment_state(exp: Experiment, dst: State, why: str) -> bool:
    """Move an experiment to `dst`; False (and nothing written) when it is already there."""
    src = State(exp.state)
    check_in_table(TRANSITIONS, "experiment", exp.id, src, dst)
    if src == dst:
        return False
    exp.state = dst
    if is_terminal(dst):
        exp.ended_at = exp.ended_at or utcnow()
    _record("experiment", exp.id, src, dst, why)
    return True


def set_trial_state(trial: Trial, dst: State, why: str) -> bool:
    """Move a trial to `dst`; a terminal state stamps `ended_at`."""
    src = State(trial.state)
    check_in_table(TRANSITIONS, "trial", trial.id, src, dst)
    if src == dst:
        return False
    trial.state = dst
    if is_terminal(dst):
        trial.ended_at = trial.ended_at or utcnow()
    _record("trial", trial.id, src, dst, why)
    return True


def set_allocation_state(alloc: Allocation, dst: AllocationState, why: str) -> bool:
    src = AllocationState(alloc.state)
    check_in_table(ALLOCATION_TRANSITIONS, "allocation", alloc.id, src, dst)
    if src == dst:
        return False
    alloc.state = dst
    now = utcnow()
    if dst == AllocationState.RUNNING:
        alloc.started_at = alloc.started_at or now
    elif dst == AllocationState.TERMINATED:
        alloc.ended_at = now
    _record("allocation", alloc.id, src, dst, why)
    return True


def set_agent_state(agent: Agent, dst: AgentState, why: str) -> bool:
    src = AgentState(agent.state)
    check_in_table(AGENT_TRANSITIONS, "agent", agent.id, src, dst)
    if src == dst:
        return False
    agent.state = dst
    _record("agent", agent.id, src, dst, why)
    return True


def set_checkpoint_state(ckpt: Checkpoint, dst: CheckpointState, why: str) -> bool:
    """Move a checkpoint through its deletion states; its latest reason stays on the row."""
    src = CheckpointState.ACTIVE if ckpt.state == "COMPLETED" else CheckpointState(ckpt.state)
    check_in_table(CHECKPOINT_TRANSITIONS, "checkpoint", ckpt.uuid, src, dst)
    if src == dst:
        return False
    ckpt.state = dst.value
    ckpt.state_reason = why[:MAX_REASON]
    ckpt.state_changed_at = utcnow()
    _record("checkpoint", ckpt.uuid, src, dst, why)
    return True


def set_instance_state(instance: Instance, dst: InstanceState, why: str) -> bool:
    """Move a cloud instance through its lifecycle; its latest reason stays on the row."""
    src = InstanceState(instance.state)
    check_in_table(INSTANCE_TRANSITIONS, "instance", instance.id, src, dst)
    if src == dst:
        return False
    instance.state = dst.value
    instance.state_reason = why[:MAX_REASON]
    _record("instance", instance.id, src, dst, why)
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
