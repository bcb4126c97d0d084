"""`harness.pytorch`: Determined's PyTorchTrial API on detlab's Core API.

    from harness import pytorch

    class MyTrial(pytorch.PyTorchTrial):
        def __init__(self, context: pytorch.PyTorchTrialContext) -> None: ...
        def build_training_data_loader(self) -> pytorch.DataLoader: ...
        def build_validation_data_loader(self) -> pytorch.DataLoader: ...
        def train_batch(self, batch, epoch_idx, batch_idx) -> dict: ...
        def evaluate_batch(self, batch) -> dict: ...

Experiment config: `entrypoint: model_def:MyTrial`. See `_controller` for the loop's rules.
Or Determined 0.38's Trainer API in a script (`entrypoint: python3 train.py`): see `_trainer`.
"""

from harness.pytorch import samplers
from harness.pytorch._context import PyTorchTrialContext
from harness.pytorch._controller import TrialResult
from harness.pytorch._data import DataLoader
from harness.pytorch._hooks import MetricReducer, PyTorchCallback
from harness.pytorch._lengths import to_batches
from harness.pytorch._load import load_trial_from_checkpoint_path
from harness.pytorch._run import run_trial
from harness.pytorch._trainer import Batch, Epoch, Trainer, TrainUnit, init
from harness.pytorch._trial import LRScheduler, PyTorchTrial, TorchData

__all__ = [
    "Batch",
    "DataLoader",
    "Epoch",
    "MetricReducer",
    "PyTorchCallback",
    "Trainer",
    "TrainUnit",
    "LRScheduler",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "TorchData",
    "TrialResult",
    "run_trial",
    "init",
    "load_trial_from_checkpoint_path",
    "samplers",
    "to_batches",
]
