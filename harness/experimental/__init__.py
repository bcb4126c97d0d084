"""`harness.experimental` (Determined's `determined.experimental`): the Python SDK."""

from harness import client
from harness.client import Checkpoint, Determined, Experiment, ExperimentState, Trial

__all__ = ["Checkpoint", "Determined", "Experiment", "ExperimentState", "Trial", "client"]
