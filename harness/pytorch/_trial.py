"""`PyTorchTrial`: the class researchers subclass; the harness runs the loop around it."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from harness.pytorch._context import PyTorchTrialContext
    from harness.pytorch._data import DataLoader

TorchData = Any  # a tensor, or lists / tuples / dicts of them: what a data loader yields


class PyTorchTrial:
    """Subclass this and point the experiment's `entrypoint` at it (`model_def:MyTrial`).

    `__init__(self, context)` builds the model(s), optimizer(s) and LR scheduler(s) through
    `context.wrap_model` / `wrap_optimizer` / `wrap_lr_scheduler` (so the harness can distribute,
    checkpoint and restore them). The harness then calls:

    - `build_training_data_loader()` / `build_validation_data_loader()`: a
      `harness.pytorch.DataLoader` (sharded across workers, exactly resumable) or a torch one;
    - `train_batch(batch, epoch_idx, batch_idx)` for every training batch (`batch_idx` counts
      batches since the trial started, across restarts); use `context.backward(loss)` and
      `context.step_optimizer(optimizer)`; return a dict of scalar metrics (tensors or numbers),
      which the harness averages over the batches between reports and across workers;
    - `evaluate_batch(batch)` (or `evaluate_batch(batch, batch_idx)`) for every validation batch;
      metrics are averaged over the whole validation set (weighted by batch size).
    """

    trial_context_class: type | None = None  # Determined compatibility

    def __init__(self, context: PyTorchTrialContext, hparams: dict[str, Any] | None = None) -> None:
        # Determined 0.38's Trainer tutorial writes `__init__(self, context, hparams)`.
        self.context = context
        self.hparams = context.get_hparams() if hparams is None else hparams

    def build_callbacks(self) -> dict[str, Any]:
        """Name -> `pytorch.PyTorchCallback` the loop calls (none by default)."""
        return {}

    def build_training_data_loader(self) -> DataLoader | torch.utils.data.DataLoader:
        raise NotImplementedError("PyTorchTrial subclasses must define build_training_data_loader")

    def build_validation_data_loader(self) -> DataLoader | torch.utils.data.DataLoader:
        raise NotImplementedError(
            "PyTorchTrial subclasses must define build_validation_data_loader"
        )

    def train_batch(self, batch: TorchData, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        raise NotImplementedError("PyTorchTrial subclasses must define train_batch")

    def evaluate_batch(self, batch: TorchData) -> dict[str, Any]:
        raise NotImplementedError("PyTorchTrial subclasses must define evaluate_batch")

    def get_batch_length(self, batch: TorchData) -> int:
        """Records in `batch` (weights validation averages); the first tensor's first dim."""
        return _batch_length(batch)


def _batch_length(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        for v in batch.values():
            return _batch_length(v)
    if isinstance(batch, list | tuple) and batch:
        return _batch_length(batch[0])
    return 1


class LRScheduler:
    """Determined's `det.pytorch.LRScheduler`: a torch LR scheduler plus when to step it."""

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(
        self,
        scheduler: Any,
        step_mode: LRScheduler.StepMode | str = StepMode.STEP_EVERY_BATCH,
        frequency: int = 1,
    ) -> None:
        if isinstance(step_mode, str):
            step_mode = LRScheduler.StepMode[step_mode.upper()]
        self.scheduler = scheduler
        self.step_mode = step_mode
        self.frequency = frequency

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
