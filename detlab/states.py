"""The state enums the master and its clients share, defined once (pure, standard library).

The master's transition tables (`master/states.py`) are built on these; the SDK exposes `State`
as Determined's `ExperimentState` and `TrialState` (`harness/_sdk_objects.py`), and the CLI and
det-tui compare the strings the REST API sends against them. `StrEnum` members equal their
values, so a JSON string and a member compare alike on either side.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """An experiment's or a trial's state."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


# Experiment and trial states that never change again.
TERMINAL_STATES = frozenset({State.COMPLETED, State.CANCELED, State.ERROR})


class TaskType(StrEnum):
    """What a task is (Determined's task types): anything the cluster runs."""

    TRIAL = "TRIAL"
    COMMAND = "COMMAND"
    # Not run yet; named so the column and the API already know them (issue 38).
    NOTEBOOK = "NOTEBOOK"
    SHELL = "SHELL"
    TENSORBOARD = "TENSORBOARD"
    CHECKPOINT_GC = "CHECKPOINT_GC"


class TaskState(StrEnum):
    """A task's own life: ACTIVE (queued or running its allocations) until it ends.

    A trial task follows its trial (ACTIVE while the trial is not terminal; then COMPLETED,
    CANCELED or ERROR); a command ends with its process: exit 0 COMPLETED, killed CANCELED,
    anything else ERROR. STOPPING: a kill was asked and its allocation has not exited yet.
    """

    ACTIVE = "ACTIVE"
    STOPPING = "STOPPING"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


TERMINAL_TASK_STATES = frozenset({TaskState.COMPLETED, TaskState.CANCELED, TaskState.ERROR})
