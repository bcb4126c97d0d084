"""`harness.experimental.client` = `harness.client` (Determined's import path)."""

from harness.client import (
    Checkpoint,
    Determined,
    Experiment,
    ExperimentState,
    Trial,
    TrialMetrics,
    TrialState,
    create_experiment,
    get_checkpoint,
    get_experiment,
    get_trial,
    list_experiments,
    login,
)

__all__ = [
    "Checkpoint",
    "Determined",
    "Experiment",
    "ExperimentState",
    "Trial",
    "TrialMetrics",
    "TrialState",
    "create_experiment",
    "get_checkpoint",
    "get_experiment",
    "get_trial",
    "list_experiments",
    "login",
]
