"""`PyTorchTrialContext`: what a `PyTorchTrial` gets in `__init__`."""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
from torch import nn

from harness.core import Context as CoreContext
from harness.core import DistributedContext
from harness.core._tensorboard import metric_tag, scalars
from harness.pytorch._trial import LRScheduler

logger = logging.getLogger("harness.pytorch")


class PyTorchTrialContext:
    """Hyperparameters, the distributed context and the wrappers for models/optimizers/schedulers.

    Everything passed through `wrap_*` is moved to the right device, wrapped for distributed
    training (`DistributedDataParallel` when the trial has several workers), and saved in and
    restored from checkpoints by the harness.
    """

    _epoch_start: bool  # set by the training loop (is_epoch_start)
    # Set by the training loop: the batch being trained, batches per epoch, the first batch.
    _current_batch_idx: int | None = None
    _epoch_len: int | None = None
    _initial_batch: int = 0

    def __init__(
        self,
        core: CoreContext,
        *,
        hparams: dict[str, Any],
        config: dict[str, Any],
        trial_id: int | None,
        experiment_id: int | None,
        trial_seed: int,
        device: torch.device | None = None,
    ) -> None:
        self._core = core
        self.distributed: DistributedContext = core.distributed
        self._hparams = dict(hparams)
        self._config = dict(config)
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        self._trial_seed = trial_seed
        self.device = device or _default_device(self.distributed.local_rank)
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self._stop_requested = False
        self.reducers: list[Any] = []  # harness.pytorch._hooks._Reducer
        self.scalers: list[Any] = []  # torch.amp.GradScaler, saved in checkpoints
        self._tensorboard_logging = True
        self._tb_writer: Any = None  # torch.utils.tensorboard.SummaryWriter, made on first use

    # -- the core API and the trial ---------------------------------------------------------
    @property
    def core(self) -> CoreContext:
        return self._core

    def get_hparams(self) -> dict[str, Any]:
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        if name not in self._hparams:
            known = ", ".join(sorted(self._hparams)) or "none"
            raise ValueError(f"no hyperparameter {name!r} in this trial (it has: {known})")
        return self._hparams[name]

    def get_experiment_config(self) -> dict[str, Any]:
        return dict(self._config)

    def get_data_config(self) -> dict[str, Any]:
        return dict(self._config.get("data") or {})

    def get_trial_id(self) -> int | None:
        return self._trial_id

    def get_experiment_id(self) -> int | None:
        return self._experiment_id

    def get_trial_seed(self) -> int:
        return self._trial_seed

    def get_global_batch_size(self) -> int:
        """The `global_batch_size` hyperparameter: records per step over all workers."""
        value = self._hparams.get("global_batch_size")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                "the hyperparameter 'global_batch_size' (a positive int) is required: "
                f"got {value!r}"
            )
        return value

    def get_per_slot_batch_size(self) -> int:
        """`global_batch_size` divided among the workers."""
        size = self.distributed.size
        global_bs = self.get_global_batch_size()
        if global_bs < size:
            raise ValueError(f"global_batch_size {global_bs} is smaller than the {size} workers")
        if global_bs % size:
            logger.warning(
                "global_batch_size %d is not divisible by %d workers: each gets %d",
                global_bs,
                size,
                global_bs // size,
            )
        return global_bs // size

    def get_stop_requested(self) -> bool:
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Stop the trial early after this batch (the searcher gets the last validation)."""
        self._stop_requested = bool(stop_requested)

    # -- wrappers -----------------------------------------------------------------------------
    def wrap_reducer(
        self,
        reducer: Any,
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> Any:
        """Register a `pytorch.MetricReducer` (validation metrics; see harness/pytorch/_hooks)."""
        from harness.pytorch._hooks import MetricReducer, _Reducer

        if not isinstance(reducer, MetricReducer):
            raise TypeError(
                "wrap_reducer takes a harness.pytorch.MetricReducer (Determined's "
                f"pytorch.MetricReducer), not {type(reducer).__name__}"
            )
        self.reducers.append(_Reducer(reducer, name, for_training, for_validation))
        return reducer

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """Move `model` to this worker's device; `DistributedDataParallel` with several workers."""
        model = model.to(self.device)
        if self.distributed.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=ids)
        self.models.append(model)
        return model

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, **_: Any) -> torch.optim.Optimizer:
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self,
        lr_scheduler: Any,
        step_mode: LRScheduler.StepMode | str = LRScheduler.StepMode.STEP_EVERY_BATCH,
        frequency: int = 1,
    ) -> Any:
        """Register a torch LR scheduler; the harness steps it per `step_mode`
        (`STEP_EVERY_BATCH`, `STEP_EVERY_EPOCH`, `STEP_EVERY_OPTIMIZER_STEP` or `MANUAL_STEP`)."""
        wrapped = (
            lr_scheduler
            if isinstance(lr_scheduler, LRScheduler)
            else LRScheduler(lr_scheduler, step_mode, frequency)
        )
        self.lr_schedulers.append(wrapped)
        return lr_scheduler

    def to_device(self, data: Any) -> Any:
        return to_device(data, self.device)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """`loss.backward()`; with several workers DDP averages the gradients during it."""
        loss.backward(**kwargs)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Iterable[nn.Parameter]], Any] | None = None,
        auto_zero_grads: bool = True,
        scaler: Any = None,
    ) -> None:
        """(Clip gradients,) step the optimizer, then zero its gradients."""
        if clip_grads is not None:
            clip_grads(p for group in optimizer.param_groups for p in group["params"])
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad(set_to_none=True)
        for sched in self.lr_schedulers:
            if sched.step_mode == LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
                sched.step()

    def unwrapped_models(self) -> list[nn.Module]:
        return [unwrap(m) for m in self.models]

    def is_epoch_start(self) -> bool:
        """Whether the batch being trained is the first of its epoch."""
        if self._current_batch_idx is None or not self._epoch_len:
            return getattr(self, "_epoch_start", False)
        return self._current_batch_idx % self._epoch_len == 0

    def is_epoch_end(self) -> bool:
        """Whether the batch being trained is the last of its epoch."""
        batch, epoch_len = self._training_position()
        return batch % epoch_len == epoch_len - 1

    def current_train_epoch(self) -> int:
        batch, epoch_len = self._training_position()
        return batch // epoch_len

    def current_train_batch(self) -> int:
        """The index (from 0, over the whole trial) of the batch being trained."""
        return self._training_position()[0]

    def get_initial_batch(self) -> int:
        """The batch training started (or resumed) from."""
        return self._initial_batch

    def _training_position(self) -> tuple[int, int]:
        if self._current_batch_idx is None or not self._epoch_len:
            raise RuntimeError("training hasn't started: call this from train_batch")
        return self._current_batch_idx, self._epoch_len

    # -- mixed precision ---------------------------------------------------------------------
    def wrap_scaler(self, scaler: Any) -> Any:
        """Track a `torch.amp.GradScaler` (saved in and restored from checkpoints); pass it to
        `step_optimizer(..., scaler=scaler)` and call `scaler.update()` after stepping."""
        self.scalers.append(scaler)
        return scaler

    def autocast_forward_pass(self, to_wrap: nn.Module) -> nn.Module:
        """Run the model's forward pass under `torch.autocast` on its device."""
        device_type = self.device.type
        forward = to_wrap.forward

        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast(device_type=device_type):
                return forward(*args, **kwargs)

        to_wrap.forward = autocast_forward
        return to_wrap

    def configure_apex_amp(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "configure_apex_amp: NVIDIA Apex AMP is not supported by detlab (deprecated in "
            "Determined too); use torch.amp with context.wrap_scaler (see "
            "docs/determined-compat.md)"
        )

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Accepted and ignored: detlab has no profiler (a warning says so once)."""
        logger.warning("context.set_profiler() is ignored: detlab has no profiler")

    # -- TensorBoard (issue 38) --------------------------------------------------------------
    def set_enable_tensorboard_logging(self, enable: bool) -> None:
        self._tensorboard_logging = bool(enable)

    def get_enable_tensorboard_logging(self) -> bool:
        return self._tensorboard_logging

    def get_tensorboard_path(self) -> pathlib.Path:
        """This worker's local TensorBoard directory; the harness uploads it to checkpoint
        storage after each metrics report (docs/tensorboard.md)."""
        return self._core.train.get_tensorboard_path()

    def get_tensorboard_writer(self) -> Any:
        """A `torch.utils.tensorboard.SummaryWriter` on `get_tensorboard_path()` (one per
        trial; the harness writes its metrics with it too)."""
        if self._tb_writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ImportError(
                    f"context.get_tensorboard_writer() needs the tensorboard package ({e}); "
                    "pip install 'detlab[torch]'"
                ) from e
            self._tb_writer = SummaryWriter(str(self.get_tensorboard_path()))
        return self._tb_writer

    def _tensorboard_report(self, group: str, steps: int, metrics: dict[str, Any]) -> None:
        """The training loop's: `metrics` (empty on workers other than the chief) as events,
        then this worker's TensorBoard files uploaded. Storage or writer trouble is logged,
        never fatal to the training."""
        uploads = self._core.train._tensorboard_uploads()
        if metrics and self._tensorboard_logging and uploads:  # off a cluster: no events
            try:
                writer = self.get_tensorboard_writer()
            except ImportError as e:
                logger.warning("%s: metrics are not written as TensorBoard events", e)
                self._tensorboard_logging = False
            else:
                for name, value in scalars(metrics).items():
                    writer.add_scalar(metric_tag(group, name), value, steps)
        if self._tb_writer is not None:
            self._tb_writer.flush()
        if not uploads:
            return
        try:
            self._core.train.upload_tensorboard_files()
        except Exception as e:  # noqa: BLE001 - any backend error; the next report retries
            logger.warning("TensorBoard files could not be uploaded: %s", e)

    def _close_tensorboard(self) -> None:
        if self._tb_writer is not None:
            self._tb_writer.close()
            self._tb_writer = None


def unwrap(model: nn.Module) -> nn.Module:
    if hasattr(model, "module") and hasattr(model, "process_group"):  # DistributedDataParallel
        return cast(nn.Module, model.module)
    return model


def _default_device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        return torch.device("cuda", local_rank % n)
    return torch.device("cpu")


def to_device(data: Any, device: torch.device) -> Any:
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=True)
    if isinstance(data, dict):
        return {k: to_device(v, device) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(to_device(v, device) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(to_device(v, device) for v in data)
    return data
