"""Determined 0.38's PyTorch Trainer API on detlab's training loop.

    with pytorch.init() as train_context:
        trial = MyTrial(train_context, hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(max_length=pytorch.Epoch(2), checkpoint_period=pytorch.Batch(100),
                    validation_period=pytorch.Epoch(1),
                    latest_checkpoint=det.get_cluster_info().latest_checkpoint)

Lengths are `Batch(n)` or `Epoch(n)` (an epoch is one pass over the training data loader, as in
Determined's Trainer) or a bare int (batches). `fit` trains to `max_length`; on a cluster whose
config still sets `searcher.max_length` (the legacy form, e.g. ASHA's rungs) it follows the
searcher's operations instead. Training ends with a validation and a checkpoint; the process
then exits 0 and the trial is COMPLETED, its searcher metric taken from the validations.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import harness
from harness.core import DistributedContext
from harness.pytorch._context import PyTorchTrialContext
from harness.pytorch._controller import _Controller
from harness.pytorch._rng import set_seeds
from harness.pytorch._trial import PyTorchTrial

logger = logging.getLogger("harness.pytorch")


class TrainUnit:
    """A training length: `Batch(n)` or `Epoch(n)`."""

    def __init__(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{type(self).__name__} takes an integer >= 0, not {value!r}")
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.value == other.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value})"


class Batch(TrainUnit):
    """`n` batches (of the global batch)."""


class Epoch(TrainUnit):
    """`n` passes over the training data loader."""


def _batches(length: TrainUnit | int | None, epoch_len: int) -> int | None:
    if length is None:
        return None
    if isinstance(length, Epoch):
        return length.value * epoch_len
    if isinstance(length, Batch):
        return length.value
    if isinstance(length, int) and not isinstance(length, bool):
        return length
    raise TypeError(f"a length is pytorch.Batch(n), pytorch.Epoch(n) or an int, not {length!r}")


class _Length:
    """A searcher-operation-shaped target for `_Controller.run` (lengths in batches)."""

    needs_metric = False  # the master reads the searcher metric from the validations

    def __init__(self, core: Any, length: int) -> None:
        self._core = core
        self.length = length

    def report_progress(self, length: float) -> None:
        if self._core.distributed.rank == 0:
            self._core.train.report_progress(min(1.0, length / max(self.length, 1)))

    def report_completed(self, searcher_metric: Any) -> None:
        pass  # the master reads the metric from the reported validations


class Trainer:
    """`Trainer(trial, context).fit(...)` (Determined 0.38's signature)."""

    # What this Trainer trains, and with which loop (det_ds.Trainer: a DeepSpeedTrial).
    _trial_type: type = PyTorchTrial
    _controller_class: type[_Controller] = _Controller

    def __init__(self, trial: Any, context: PyTorchTrialContext) -> None:
        if not isinstance(trial, self._trial_type):
            raise TypeError(
                f"{type(self).__module__}.Trainer takes a {self._trial_type.__name__}, "
                f"not {type(trial).__name__}"
            )
        self._trial: Any = trial
        self._context = context

    def fit(
        self,
        checkpoint_period: TrainUnit | int | None = None,
        validation_period: TrainUnit | int | None = None,
        max_length: TrainUnit | int | None = None,
        reporting_period: TrainUnit | int = Batch(100),
        checkpoint_policy: str = "best",
        latest_checkpoint: str | None = None,
        step_zero_validation: bool = False,
        test_mode: bool = False,
        profiling_enabled: bool = False,
    ) -> Any:
        ctx = self._context
        core = ctx.core
        info = harness.get_cluster_info()
        if latest_checkpoint is None and info is not None:
            latest_checkpoint = info.latest_checkpoint
        config = ctx.get_experiment_config()
        if step_zero_validation:
            config["perform_initial_validation"] = True
        controller = self._controller_class(
            type(self._trial),
            core,
            hparams=ctx.get_hparams(),
            config=config,
            trial_seed=ctx.get_trial_seed(),
            trial_id=ctx.get_trial_id(),
            experiment_id=ctx.get_experiment_id(),
            latest_checkpoint=latest_checkpoint,
            context=ctx,
            trial=self._trial,
        )
        epoch_len = controller.epoch_len
        controller.report_every = _batches(reporting_period, epoch_len) or 0
        if validation_period is not None:
            controller.val_every = _batches(validation_period, epoch_len) or 0
        if checkpoint_period is not None:
            controller.ckpt_every = _batches(checkpoint_period, epoch_len) or 0
        if checkpoint_policy not in ("best", "all", "none"):
            raise ValueError("checkpoint_policy is one of 'best', 'all' or 'none'")
        if test_mode:
            max_length = Batch(1)
        searcher_length = (config.get("searcher") or {}).get("max_length")
        if info is not None and searcher_length and not test_mode:
            # The legacy form: the searcher (ASHA's rungs, ...) says how far to train.
            if max_length is not None:
                logger.info(
                    "searcher.max_length is set: training follows the searcher's operations "
                    "(fit's max_length=%r is not used)",
                    max_length,
                )
            return controller.run()
        if max_length is None:
            raise ValueError(
                "fit() needs max_length (pytorch.Epoch(n) or pytorch.Batch(n)) when the "
                "experiment config has no searcher.max_length"
            )
        target = _batches(max_length, epoch_len)
        assert target is not None
        controller.unit = "batches"
        return controller.run([_Length(core, target)])


@contextlib.contextmanager
def init(
    *,
    hparams: dict[str, Any] | None = None,
    exp_conf: dict[str, Any] | None = None,
    distributed: DistributedContext | None = None,
    aggregation_frequency: int = 1,
    enable_tensorboard_logging: bool = True,
) -> Iterator[PyTorchTrialContext]:
    """Determined 0.38's `pytorch.init()`: a `PyTorchTrialContext` for the Trainer API.

    On a cluster the hyperparameters, config and seed are the trial's (arguments are ignored);
    off-cluster they come from `hparams`/`exp_conf` (seed: `reproducibility.experiment_seed`),
    and checkpoints go to ./checkpoints. `distributed` defaults to the launcher's
    torch.distributed environment (`python3 -m determined.launch.torch_distributed`).
    """
    if aggregation_frequency != 1:
        raise ValueError("aggregation_frequency other than 1 is not supported by detlab")
    with init_context(
        PyTorchTrialContext,
        hparams=hparams,
        exp_conf=exp_conf,
        distributed=distributed,
        enable_tensorboard_logging=enable_tensorboard_logging,
    ) as context:
        yield context


@contextlib.contextmanager
def init_context(
    context_class: type[PyTorchTrialContext],
    *,
    hparams: dict[str, Any] | None,
    exp_conf: dict[str, Any] | None,
    distributed: DistributedContext | None,
    enable_tensorboard_logging: bool,
    before: Any = None,
) -> Iterator[Any]:
    """The Core API context and a `context_class` for it (`before(core)` runs first)."""
    info = harness.get_cluster_info()
    trial_id: int | None
    exp_id: int | None
    if info is not None:
        hp, cfg = dict(info.trial.hparams), dict(info.trial.config)
        seed, trial_id, exp_id = (
            info.trial.trial_seed,
            info.trial.trial_id,
            info.trial.experiment_id,
        )
    else:
        if hparams is None:
            hparams = json.loads(os.environ.get("DET_HPARAMS") or "{}")
        hp, cfg = dict(hparams or {}), dict(exp_conf or {})
        seed = int((cfg.get("reproducibility") or {}).get("experiment_seed") or 0)
        trial_id = exp_id = None
    # MANUAL: the training loop writes and uploads the TensorBoard events itself.
    core = harness.core.init(
        distributed=distributed, tensorboard_mode=harness.core.TensorboardMode.MANUAL
    )
    with core:
        if before is not None:
            before(core)
        set_seeds(seed)
        context = context_class(
            core,
            hparams=hp,
            config=cfg,
            trial_id=trial_id,
            experiment_id=exp_id,
            trial_seed=seed,
        )
        context.set_enable_tensorboard_logging(enable_tensorboard_logging)
        yield context
