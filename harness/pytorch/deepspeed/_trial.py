"""`DeepSpeedTrial`: the methods a Determined 0.38 DeepSpeed trial defines."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.pytorch._hooks import PyTorchCallback
from harness.pytorch.deepspeed._context import DeepSpeedTrialContext

if TYPE_CHECKING:
    from harness.core import Context as CoreContext
    from harness.pytorch.deepspeed._controller import DeepSpeedController


class DeepSpeedTrial(abc.ABC):
    """Unlike PyTorchTrial, train_batch and evaluate_batch get an iterator over the data loader
    (a pipeline engine consumes several micro batches in one call). Without
    `context.disable_auto_grad_accumulation()`, train_batch is called
    `gradient_accumulation_steps` times per batch, each taking one micro batch."""

    trial_context_class = DeepSpeedTrialContext

    @abc.abstractmethod
    def __init__(self, context: DeepSpeedTrialContext) -> None: ...

    @abc.abstractmethod
    def train_batch(
        self, dataloader_iter: Iterator[Any] | None, epoch_idx: int, batch_idx: int
    ) -> dict[str, Any]: ...

    @abc.abstractmethod
    def build_training_data_loader(self) -> Any: ...

    @abc.abstractmethod
    def build_validation_data_loader(self) -> Any: ...

    @abc.abstractmethod
    def evaluate_batch(
        self, dataloader_iter: Iterator[Any] | None, batch_idx: int
    ) -> dict[str, Any]: ...

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        return {}

    def save(self, context: DeepSpeedTrialContext, path: Path) -> None:
        """Called on every worker: each engine's save_checkpoint (tag `model{i}`) writes its
        shards under `path`."""
        engines: list[Any] = context.models
        for i, m in enumerate(engines):
            m.save_checkpoint(str(path), tag=f"model{i}")

    def load(self, context: DeepSpeedTrialContext, load_path: Path) -> None:
        """Called on every worker: each engine's load_checkpoint from tag `model{i}`."""
        engines: list[Any] = context.models
        for i, m in enumerate(engines):
            loaded, _ = m.load_checkpoint(str(load_path), tag=f"model{i}")
            if loaded is None:
                raise RuntimeError(
                    f"DeepSpeed found no checkpoint for model engine {i} (tag model{i}) "
                    f"in {load_path}"
                )

    @classmethod
    def _make_controller(cls, core: CoreContext, **kwargs: Any) -> DeepSpeedController:
        """How run_trial builds this trial's training loop (a PyTorchTrial has none)."""
        from harness.pytorch.deepspeed._controller import DeepSpeedController

        return DeepSpeedController.build(cls, core, **kwargs)
