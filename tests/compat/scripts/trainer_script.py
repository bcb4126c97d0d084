"""Determined 0.38's PyTorch Trainer API, written as its tutorial writes it (no detlab names):
`pytorch.init()`, `PyTorchTrial.__init__(self, context, hparams)`, `Trainer.fit(...)` with
`pytorch.Epoch`/`pytorch.Batch`, a `MetricReducer` and a `PyTorchCallback`."""

import logging
import time

import determined as det
import torch
from determined import pytorch
from torch import nn


class MaxAbsError(pytorch.MetricReducer):
    def __init__(self):
        self.reset()

    def reset(self):
        self.worst = 0.0

    def update(self, err):
        self.worst = max(self.worst, float(err.abs().max()))

    def per_slot_reduce(self):
        return self.worst

    def cross_slot_reduce(self, per_slot_metrics):
        return max(per_slot_metrics)


class Announce(pytorch.PyTorchCallback):
    def __init__(self):
        self.validations = 0

    def on_validation_end(self, metrics):
        self.validations += 1
        print(f"callback: validation {self.validations} ended", flush=True)

    def state_dict(self):
        return {"validations": self.validations}

    def load_state_dict(self, state_dict):
        self.validations = state_dict["validations"]


def dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return torch.utils.data.TensorDataset(x, y)


class LinearTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: dict) -> None:
        self.context = context
        self.hparams = hparams
        self.model = context.wrap_model(nn.Linear(4, 1))
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=hparams["lr"])
        )
        self.max_err = context.wrap_reducer(MaxAbsError(), name="max_abs_error")

    def build_training_data_loader(self):
        return pytorch.DataLoader(dataset(64, 0), batch_size=8, shuffle=True)

    def build_validation_data_loader(self):
        return pytorch.DataLoader(dataset(32, 1), batch_size=8)

    def build_callbacks(self):
        return {"announce": Announce()}

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        time.sleep(self.hparams.get("sleep", 0))
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        pred = self.model(x)
        self.max_err.update(pred - y)
        return {"validation_loss": nn.functional.mse_loss(pred, y)}


def length(spec):
    unit, n = spec
    return pytorch.Epoch(n) if unit == "epochs" else pytorch.Batch(n)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    hparams = info.trial.hparams
    with pytorch.init() as train_context:
        trial = LinearTrial(train_context, hparams=hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(
            max_length=length(hparams["max_length"]),
            validation_period=length(hparams["validation_period"]),
            checkpoint_period=length(hparams["checkpoint_period"]),
            latest_checkpoint=info.latest_checkpoint,
        )
