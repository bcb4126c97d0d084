"""A checkpoint's state machine: the one place that changes `Checkpoint.state`.

ACTIVE -> DELETING -> DELETED | DELETE_FAILED; a failed delete is retried (DELETE_FAILED ->
DELETING). DELETED is final: it is set only after the files are gone.
"""

from __future__ import annotations

import enum

from master.db import utcnow
from master.models import Checkpoint
from master.states import IllegalTransition


class CheckpointState(enum.StrEnum):
    ACTIVE = "ACTIVE"
    DELETING = "DELETING"
    DELETED = "DELETED"
    DELETE_FAILED = "DELETE_FAILED"


S = CheckpointState
TRANSITIONS: dict[CheckpointState, frozenset[CheckpointState]] = {
    S.ACTIVE: frozenset({S.DELETING}),
    S.DELETING: frozenset({S.DELETED, S.DELETE_FAILED}),
    S.DELETE_FAILED: frozenset({S.DELETING}),
    S.DELETED: frozenset(),
}
LIVE = (S.ACTIVE.value,)  # holds files that GC may still plan over


def state_of(ckpt: Checkpoint) -> CheckpointState:
    # Rows written before this state machine said COMPLETED for a stored checkpoint.
    return S.ACTIVE if ckpt.state == "COMPLETED" else CheckpointState(ckpt.state)


def transition(ckpt: Checkpoint, dst: CheckpointState, reason: str) -> None:
    """Move `ckpt` to `dst` (checked against the table) and record why; the caller commits."""
    src = state_of(ckpt)
    if dst not in TRANSITIONS[src]:
        raise IllegalTransition(f"checkpoint {ckpt.uuid} is {src.value}; it cannot become {dst}")
    ckpt.state = dst.value
    ckpt.state_reason = reason
    ckpt.state_changed_at = utcnow()
