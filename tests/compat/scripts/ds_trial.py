"""A DeepSpeedTrial in Determined 0.38's form (as examples/deepspeed/* write it): the engine from
deepspeed.initialize registered with wrap_model_engine, the DeepSpeed config overwritten from the
hyperparameters, train_batch/evaluate_batch taking the loader's iterator. A tiny regression on
fixed random data, so every number is reproducible."""

import time

import deepspeed
import torch
from determined.pytorch import DataLoader
from determined.pytorch import deepspeed as det_ds
from torch import nn


def _data(n: int, seed: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


class RegressionTrial(det_ds.DeepSpeedTrial):
    def __init__(self, context: det_ds.DeepSpeedTrialContext) -> None:
        self.context = context
        hp = context.get_hparams()
        ds_config = det_ds.overwrite_deepspeed_config(
            {
                "train_micro_batch_size_per_gpu": 4,
                "gradient_accumulation_steps": 1,
                # torch_adam: torch's Adam; DeepSpeed's own (FusedAdam, CPUAdam) would
                # JIT-compile an op on first use.
                "optimizer": {"type": "Adam", "params": {"lr": hp["lr"], "torch_adam": True}},
                "zero_optimization": {"stage": 0},
            },
            hp.get("overwrite_deepspeed_args", {}),
        )
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        engine, _, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=ds_config
        )
        self.engine = context.wrap_model_engine(engine)
        self.loss = nn.MSELoss()

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(
            _data(256, 1), batch_size=self.context.train_micro_batch_size_per_gpu, shuffle=True
        )

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(_data(64, 2), batch_size=self.context.train_micro_batch_size_per_gpu)

    def train_batch(self, dataloader_iter, epoch_idx, batch_idx):
        time.sleep(self.context.get_hparams().get("sleep", 0))  # time to pause it mid-run
        x, y = self.context.to_device(next(dataloader_iter))
        loss = self.loss(self.engine(x), y)
        self.engine.backward(loss)
        self.engine.step()
        return {"loss": loss.item()}

    def evaluate_batch(self, dataloader_iter, batch_idx):
        x, y = self.context.to_device(next(dataloader_iter))
        return {"val_loss": self.loss(self.engine(x), y).item()}
