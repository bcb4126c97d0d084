"""A checkpoint's states, as the checkpoint code reads them (the table lives in master/states.py,
the one writer in master/services/transitions.py)."""

from __future__ import annotations

from master.models import Checkpoint
from master.services.transitions import set_checkpoint_state as transition
from master.states import CHECKPOINT_TRANSITIONS as TRANSITIONS
from master.states import CheckpointState

LIVE = (CheckpointState.ACTIVE.value,)  # holds files that GC may still plan over


def state_of(ckpt: Checkpoint) -> CheckpointState:
    # Rows written before checkpoints had a state machine said COMPLETED for a stored one:
    # migration 0011 made them ACTIVE.
    return CheckpointState(ckpt.state)


__all__ = ["LIVE", "TRANSITIONS", "CheckpointState", "state_of", "transition"]
