"""A cloud instance's states, as the provisioner reads them (the table lives in master/states.py,
the one writer in master/services/transitions.py)."""

from __future__ import annotations

from master.services.transitions import set_instance_state as transition
from master.states import INSTANCE_TRANSITIONS as TRANSITIONS
from master.states import InstanceState

S = InstanceState
LIVE = frozenset({S.LAUNCHING, S.STARTING, S.RUNNING})
ENDED = frozenset({S.TERMINATED, S.FAILED})

__all__ = ["ENDED", "LIVE", "TRANSITIONS", "InstanceState", "transition"]
