"""The training loop around a `DeepSpeedTrial`: PyTorchTrial's controller (lengths, reports,
validation, preemption and what a checkpoint holds are the same), with DeepSpeed's batches.

A batch is `gradient_accumulation_steps` micro batches of the data loader: the epoch has
`len(loader) // gradient_accumulation_steps` batches, train_batch gets the loader's iterator
(called once per micro batch, or once per batch with `disable_auto_grad_accumulation()` or a
pipeline engine) and evaluate_batch is called `len(validation loader)` times (a pipeline engine:
divided by the accumulation steps), each batch's metrics weighing the same.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch

from harness.core import Context as CoreContext
from harness.pytorch._controller import _Controller, add_weighted
from harness.pytorch._rng import set_seeds
from harness.pytorch._trial import LRScheduler
from harness.pytorch.deepspeed import _checkpoints
from harness.pytorch.deepspeed._context import DeepSpeedTrialContext
from harness.pytorch.deepspeed._import import ensure_process_group, import_deepspeed
from harness.pytorch.deepspeed._trial import DeepSpeedTrial

logger = logging.getLogger("harness.pytorch")


class _OutOfData(Exception):
    pass


def _guarded(it: Iterator[Any]) -> Iterator[Any]:
    """The loader's iterator; running out inside train_batch becomes a clear error (a bare
    StopIteration would end the user's loop silently, or the trial with no message)."""
    yield from it
    raise _OutOfData


class DeepSpeedController(_Controller):
    context: DeepSpeedTrialContext
    trial: DeepSpeedTrial  # type: ignore[assignment]

    @classmethod
    def build(
        cls,
        trial_class: type[DeepSpeedTrial],
        core: CoreContext,
        *,
        hparams: dict[str, Any],
        config: dict[str, Any],
        trial_seed: int,
        trial_id: int | None,
        experiment_id: int | None,
        latest_checkpoint: str | None,
    ) -> DeepSpeedController:
        import_deepspeed()
        if core.distributed.size == 1:
            ensure_process_group("nccl" if torch.cuda.is_available() else "gloo")
        set_seeds(trial_seed)
        context = DeepSpeedTrialContext(
            core,
            hparams=hparams,
            config=config,
            trial_id=trial_id,
            experiment_id=experiment_id,
            trial_seed=trial_seed,
        )
        trial = trial_class(context)
        if not context.models:
            raise RuntimeError(
                f"{trial_class.__name__}.__init__ registered no model engine: call "
                "context.wrap_model_engine(engine) with deepspeed.initialize's engine"
            )
        return cls(
            trial_class,
            core,
            hparams=hparams,
            config=config,
            trial_seed=trial_seed,
            trial_id=trial_id,
            experiment_id=experiment_id,
            latest_checkpoint=latest_checkpoint,
            context=context,
            trial=trial,
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ctx = self.context
        self.micro_batches = ctx.num_micro_batches_per_slot
        self.calls_per_batch = (
            1 if ctx._manual_grad_accumulation or ctx.use_pipeline_parallel else self.micro_batches
        )
        loader_len = len(self.train_loader)
        if loader_len < self.micro_batches:
            raise ValueError(
                f"the training data loader has {loader_len} micro batches per epoch, fewer than "
                f"one batch of gradient_accumulation_steps={self.micro_batches}"
            )
        self.epoch_len = loader_len // self.micro_batches
        self._eval_calls = len(self.val_loader)
        if ctx.use_pipeline_parallel:
            self._eval_calls //= self.micro_batches

    def _open_epoch(self, epoch: int, offset: int) -> Any:
        it = self.train_loader.epoch(epoch, offset * self.micro_batches)
        self.context._epoch_start = offset == 0
        self.context._epoch_len = self.epoch_len
        if offset == 0:
            self._call("on_training_epoch_start", epoch)
        return _guarded(iter(it))

    def _train_span(
        self, it: Any, epoch: int, boundary: int, batch_scheds: list[LRScheduler]
    ) -> tuple[int, str | None]:
        trial, context, pending = self.trial, self.context, self.pending
        flag = self._preempt_flag
        single = self.dist.size == 1
        batch_idx = self.batches
        while batch_idx < boundary:
            context._current_batch_idx = batch_idx
            for _ in range(self.calls_per_batch):
                try:
                    out = trial.train_batch(it, epoch, batch_idx)
                except _OutOfData:
                    raise RuntimeError(
                        f"the training data loader ran out in batch {batch_idx} (epoch {epoch}): "
                        f"an epoch has {self.epoch_len} batches of {self.micro_batches} micro "
                        "batches; train_batch may take only its own micro batches"
                    ) from None
                if out:
                    pending.append(
                        {
                            k: v.detach() if isinstance(v, torch.Tensor) else v
                            for k, v in out.items()
                        }
                    )
            batch_idx += 1
            if flag is not None and flag():
                return batch_idx, "preempt"
            if single and context._stop_requested:
                return batch_idx, "user_stop"
        return batch_idx, None

    def _evaluate_batches(self) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        sums: dict[str, list[float]] = {}
        weights: dict[str, list[float]] = {}
        it = _guarded(iter(self.val_loader.epoch(0, 0)))
        for idx in range(self._eval_calls):
            try:
                out = self.trial.evaluate_batch(it, idx)
            except _OutOfData:
                raise RuntimeError(
                    f"the validation data loader ran out at evaluate_batch call {idx} of "
                    f"{self._eval_calls}"
                ) from None
            add_weighted(sums, weights, out, 1.0)
        return sums, weights

    def _checkpoint(self) -> None:
        _checkpoints.store(self)

    def _restore(self, uuid: str) -> None:
        _checkpoints.restore(self, uuid)
