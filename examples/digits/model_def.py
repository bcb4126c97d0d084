"""The digits MLP as a `harness.pytorch.PyTorchTrial`: the harness runs the loop.

`const.yaml` (entrypoint `model_def:DigitsTrial`) trains it on one slot, `distributed.yaml` on
two workers with torch.distributed. Compare with `train.py`, the same model on the Core API:
here the harness does the batching, sharding, metrics averaging, validation, checkpoints,
preemption and exact resume.

Off-cluster:  python3 -c "from model_def import *; from harness.pytorch import run_trial; \
run_trial(DigitsTrial, hparams=DEFAULT_HPARAMS, max_length=300)"
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import TensorDataset

from harness import pytorch

DEFAULT_HPARAMS: dict[str, Any] = {
    "learning_rate": 0.01,
    "hidden_size": 64,
    "dropout": 0.1,
    "global_batch_size": 32,
}
SPLIT_SEED = 0  # the same train/validation split for every trial, whatever its seed


def load_data() -> tuple[TensorDataset, TensorDataset]:
    """The 1,797 8x8 digit images bundled with scikit-learn, split 80/20 (stratified, fixed)."""
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32) / 16.0  # pixel values are 0..16
    x_tr, x_va, y_tr, y_va = train_test_split(
        x, y, test_size=0.2, random_state=SPLIT_SEED, stratify=y
    )
    return (
        TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr)),
        TensorDataset(torch.from_numpy(x_va), torch.from_numpy(y_va)),
    )


def build_model(hidden_size: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, hidden_size),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden_size, 10),
    )


class DigitsTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        # A model this small trains fastest on one thread, and leaves the other cores free.
        torch.set_num_threads(1)
        self.train_data, self.val_data = load_data()
        hidden, dropout = context.get_hparam("hidden_size"), context.get_hparam("dropout")
        self.model = context.wrap_model(build_model(int(hidden), float(dropout)))
        self.optimizer = context.wrap_optimizer(
            torch.optim.Adam(self.model.parameters(), lr=float(context.get_hparam("learning_rate")))
        )
        self.loss_fn = nn.CrossEntropyLoss()

    def build_training_data_loader(self) -> pytorch.DataLoader:
        # Per-slot batches; the harness shards and shuffles (seeded by the trial seed + epoch).
        return pytorch.DataLoader(
            self.train_data,
            batch_size=self.context.get_per_slot_batch_size(),
            shuffle=True,
            drop_last=True,
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.val_data, batch_size=360)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        return {
            "validation_loss": self.loss_fn(logits, y),
            "validation_accuracy": (logits.argmax(dim=1) == y).float().mean(),
        }
