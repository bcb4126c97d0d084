"""`PyTorchTrialContext`: what a `PyTorchTrial` gets in `__init__`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
from torch import nn

from harness.core import Context as CoreContext
from harness.core import DistributedContext
from harness.pytorch._trial import LRScheduler

logger = logging.getLogger("harness.pytorch")


class PyTorchTrialContext:
    """Hyperparameters, the distributed context and the wrappers for models/optimizers/schedulers.

    Everything passed through `wrap_*` is moved to the right device, wrapped for distributed
    training (`DistributedDataParallel` when the trial has several workers), and saved in and
    restored from checkpoints by the harness.
    """

    _epoch_start: bool  # set by the training loop (is_epoch_start)

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

    def is_epoch_start(self) -> bool:  # Determined compatibility; set by the loop
        return getattr(self, "_epoch_start", False)


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
