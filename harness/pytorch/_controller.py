"""The training loop around a `PyTorchTrial`, built on the Core API.

Lengths: a searcher operation's `length` is in the unit of `searcher.max_length`; batches are
used as they are, `records` become `ceil(records / global_batch_size)` batches and `epochs`
`ceil(epochs * records_per_epoch / global_batch_size)`. `min_validation_period` and
`min_checkpoint_period` are converted the same way.

When things happen, at batch count `S` (batches trained since the trial started, across
restarts; it is the `steps_completed` of every report and checkpoint):

1. training metrics (averaged over the batches since the last report, over all workers) are
   reported when `S` is a multiple of `scheduling_unit` (config, default 100) and at the end of
   each searcher operation;
2. validation runs when `S` is a multiple of `min_validation_period` and at the end of each
   searcher operation (`perform_initial_validation` adds one at 0);
3. a checkpoint is stored when `S` is a multiple of `min_checkpoint_period`, at the end of each
   searcher operation and when the master asks the trial to stop (pause, preemption);
4. the preemption signal is checked after every batch (single worker: a flag) or every
   `DET_PREEMPT_CHECK_EVERY` (10) batches with several workers (a collective, so all stop at the
   same batch).

Everything that decides the trial's numbers is in the checkpoint: weights, optimizers, LR
schedulers, the RNG states of every worker, the data position (= `S`; shuffling depends only on
the trial seed and the epoch) and the training metrics not reported yet. So a trial paused and
resumed reports exactly the metrics of one that never stopped.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.core import Context as CoreContext
from harness.core import DistributedContext, EarlyExitReason
from harness.pytorch import _checkpoints
from harness.pytorch._context import PyTorchTrialContext, to_device
from harness.pytorch._data import _Loader, adopt
from harness.pytorch._lengths import to_batches
from harness.pytorch._metric_lists import merge_lists, scalar_lists
from harness.pytorch._rng import set_seeds
from harness.pytorch._trial import LRScheduler, PyTorchTrial

logger = logging.getLogger("harness.pytorch")

PREEMPT_CHECK_EVERY = int(os.environ.get("DET_PREEMPT_CHECK_EVERY", "10"))


@dataclass
class TrialResult:
    """What a run reported (on the chief; other workers see empty lists)."""

    training: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    validation: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    batches_trained: int = 0
    preempted: bool = False


class _Controller:
    def __init__(
        self,
        trial_class: type[PyTorchTrial],
        core: CoreContext,
        *,
        hparams: dict[str, Any],
        config: dict[str, Any],
        trial_seed: int,
        trial_id: int | None,
        experiment_id: int | None,
        latest_checkpoint: str | None,
        context: PyTorchTrialContext | None = None,
        trial: PyTorchTrial | None = None,
    ) -> None:
        self.core = core
        self.dist: DistributedContext = core.distributed
        self.config = config
        self.trial_seed = trial_seed
        self.latest_checkpoint = latest_checkpoint
        self.result = TrialResult()
        self.batches = 0
        self.is_chief = self.dist.rank == 0

        if context is None or trial is None:
            set_seeds(trial_seed)
            context = PyTorchTrialContext(
                core,
                hparams=hparams,
                config=config,
                trial_id=trial_id,
                experiment_id=experiment_id,
                trial_seed=trial_seed,
            )
            trial = build_trial(trial_class, context)
        self.context = context
        self.trial = trial
        self.callbacks: list[Any] = list((trial.build_callbacks() or {}).values())
        rank, size = self.dist.rank, self.dist.size
        self.train_loader = adopt(
            self.trial.build_training_data_loader(),
            seed=trial_seed,
            rank=rank,
            size=size,
            training=True,
        )
        self.val_loader = adopt(
            self.trial.build_validation_data_loader(),
            seed=trial_seed,
            rank=rank,
            size=size,
            training=False,
        )
        if size > 1 and not isinstance(self.train_loader, _Loader):
            logger.warning(
                "the training data loader is not a harness.pytorch.DataLoader (or a torch "
                "DataLoader with a default sampler): it is not sharded across the %d workers",
                size,
            )
        self.epoch_len = len(self.train_loader)
        hp_gbs = hparams.get("global_batch_size")
        self.global_bs = hp_gbs if isinstance(hp_gbs, int) and hp_gbs > 0 else None
        self.records_per_epoch = config.get("records_per_epoch")
        self.unit = next(iter((config.get("searcher") or {}).get("max_length") or {"batches": 0}))
        self.report_every = int(config.get("scheduling_unit") or 100)
        self.val_every = self._batches(config.get("min_validation_period")) or 0
        self.ckpt_every = self._batches(config.get("min_checkpoint_period")) or 0
        self.preempt_every = 1 if size == 1 else max(PREEMPT_CHECK_EVERY, 1)
        watcher = getattr(core.preempt, "_watcher", None)
        self._preempt_flag = watcher.flag.is_set if (watcher is not None and size == 1) else None
        self.metric_name = (config.get("searcher") or {}).get("metric")
        self.pending: list[dict[str, Any]] = []  # metrics of batches not reported yet
        self.carried: dict[str, list[float]] = {}  # the same, restored from a checkpoint
        self.last_validation: tuple[int, dict[str, float]] | None = None
        self.last_checkpoint_at: int | None = None
        self._eval_takes_idx = len(inspect.signature(self.trial.evaluate_batch).parameters) >= 2
        self._on_cpu = self.context.device.type == "cpu"
        self._t_report = time.monotonic()
        self._b_report = 0

    def _batches(self, length: Any, unit: str = "batches") -> int | None:
        return to_batches(
            length,
            unit=unit,
            global_batch_size=self.global_bs,
            records_per_epoch=self.records_per_epoch,
        )

    # -- the outer loop ---------------------------------------------------------------------
    def _call(self, hook: str, *args: Any) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(*args)

    def run(self, ops: Any = None) -> TrialResult:
        """Train through `ops` (default: the searcher's operations)."""
        if self.latest_checkpoint:
            self._restore(self.latest_checkpoint)
        self.context._initial_batch = self.batches
        self._b_report = self.batches
        self._call("on_trial_startup", self.batches, self.latest_checkpoint)
        self._call("on_training_start")
        try:
            return self._run(self.core.searcher.operations() if ops is None else ops)
        finally:
            self._call("on_trial_shutdown")
            self.context._tensorboard_report("training", self.batches, {})  # what is left
            self.context._close_tensorboard()

    def _run(self, ops: Any) -> TrialResult:
        if self.config.get("perform_initial_validation") and self.batches == 0:
            self._validate()
        for op in ops:
            target = self._batches(op.length, self.unit)
            assert target is not None
            stop = self._train_to(target, op)
            if stop == "preempt":
                self._checkpoint()
                self.result.preempted = True
                logger.info("preempted at batch %d: checkpointed, exiting", self.batches)
                break
            self._report_training(op, target)
            metrics = self._validate()
            self._checkpoint()
            if self.is_chief and getattr(op, "needs_metric", True):
                op.report_completed(self._searcher_metric(metrics))
            if stop == "user_stop":
                logger.info("stop requested by the trial at batch %d", self.batches)
                self.core.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
                break
        self.result.batches_trained = self.batches
        return self.result

    def _searcher_metric(self, metrics: dict[str, float]) -> float:
        name = self.metric_name
        if not name:
            return float("nan")
        if name not in metrics:
            raise KeyError(
                f"the searcher metric {name!r} is not among the validation metrics "
                f"({', '.join(sorted(metrics)) or 'none'}) that evaluate_batch returned"
            )
        return metrics[name]

    # -- training ---------------------------------------------------------------------------
    def _train_to(self, target: int, op: Any) -> str | None:
        """Train until `target` batches; returns "preempt" / "user_stop" when stopped early."""
        context, epoch_len = self.context, self.epoch_len
        batch_scheds = self._schedulers(LRScheduler.StepMode.STEP_EVERY_BATCH)
        epoch_scheds = self._schedulers(LRScheduler.StepMode.STEP_EVERY_EPOCH)
        it = None
        it_epoch = -1
        while self.batches < target:
            epoch, offset = divmod(self.batches, epoch_len)
            if it is None or it_epoch != epoch:
                it = self._open_epoch(epoch, offset)
                it_epoch = epoch
            batch_idx, stopped = self._train_span(
                it, epoch, self._span_end(target, epoch), batch_scheds
            )
            context._epoch_start = False
            self.batches = batch_idx
            if batch_idx % epoch_len == 0:
                self._end_epoch(batch_idx // epoch_len, epoch_scheds)
                it = None
            # What an uninterrupted run does at this batch happens before a preemption too: a
            # stop that lands on a report or validation boundary would otherwise carry those
            # batches' metrics into the next report (the resumed trial's numbers would differ).
            self._after_span(op, target)
            if stopped == "preempt":
                self.core.preempt.should_preempt()  # acknowledges the signal
                return stopped
            if stopped:
                return stopped
            if self.dist.size > 1 and batch_idx % self.preempt_every == 0:
                stopped = self._collective_stop()
                if stopped:
                    return stopped
        return None

    def _schedulers(self, mode: Any) -> list[LRScheduler]:
        return [s for s in self.context.lr_schedulers if s.step_mode == mode]

    def _open_epoch(self, epoch: int, offset: int) -> Any:
        """The training batches of `epoch` from batch `offset` on."""
        it = self.train_loader.epoch(epoch, offset)
        self.context._epoch_start = offset == 0
        self.context._epoch_len = self.epoch_len
        if offset == 0:
            self._call("on_training_epoch_start", epoch)
        return it

    def _span_end(self, target: int, epoch: int) -> int:
        """Where the next span of training stops: the target, the epoch's end or the next
        report, validation, checkpoint or preemption check, whichever comes first."""
        boundary = min(target, (epoch + 1) * self.epoch_len)
        for every in (self.report_every, self.val_every, self.ckpt_every, self.preempt_every):
            if every:
                boundary = min(boundary, (self.batches // every + 1) * every)
        return boundary

    def _train_span(
        self, it: Any, epoch: int, boundary: int, batch_scheds: list[LRScheduler]
    ) -> tuple[int, str | None]:
        """Train batches up to `boundary` (the hot loop: locals only). Returns the batch index
        reached and "preempt" / "user_stop" when stopped early."""
        trial, context, pending = self.trial, self.context, self.pending
        epoch_len = self.epoch_len
        flag = self._preempt_flag
        single = self.dist.size == 1
        device = None if self._on_cpu else context.device
        batch_idx = self.batches
        while batch_idx < boundary:
            try:
                batch = next(it)
            except StopIteration:
                raise RuntimeError(
                    f"the training data loader ran out after {batch_idx - epoch * epoch_len}"
                    f" batches of epoch {epoch}; it has {epoch_len} per epoch"
                ) from None
            if device is not None:
                batch = to_device(batch, device)
            context._current_batch_idx = batch_idx
            out = trial.train_batch(batch, epoch, batch_idx)
            batch_idx += 1
            if out:
                pending.append(
                    {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
                )
            for s in batch_scheds:
                if batch_idx % s.frequency == 0:
                    s.step()
            if flag is not None and flag():
                return batch_idx, "preempt"
            if single and context._stop_requested:
                return batch_idx, "user_stop"
        return batch_idx, None

    def _end_epoch(self, epochs_done: int, epoch_scheds: list[LRScheduler]) -> None:
        self._call("on_training_epoch_end", epochs_done - 1)
        for s in epoch_scheds:
            if epochs_done % s.frequency == 0:
                s.step()

    def _after_span(self, op: Any, target: int) -> None:
        """Report, validate and checkpoint where a span ends on their period."""
        batch_idx = self.batches
        if self.report_every and batch_idx % self.report_every == 0:
            self._report_training(op, target)
        if self.val_every and batch_idx % self.val_every == 0 and batch_idx < target:
            self._validate()
        if self.ckpt_every and batch_idx % self.ckpt_every == 0:
            self._checkpoint()

    def _collective_stop(self) -> str | None:
        """One collective: the chief's preemption flag and every worker's stop request."""
        chief_flag = self.is_chief and self.core.preempt._chief_flag()
        parts = self.dist.allgather((chief_flag, self.context._stop_requested))
        if parts[0][0]:
            self.core.preempt.acknowledge_preemption_signal()
            return "preempt"
        if any(p[1] for p in parts):
            return "user_stop"
        return None

    def _report_training(self, op: Any, target: int) -> None:
        values = merge_lists(self.carried, scalar_lists(self.pending))
        self.pending.clear()
        self.carried = {}
        if self.dist.size > 1:
            merged: dict[str, list[float]] = {}
            for part in self.dist.allgather(values):
                merged = merge_lists(merged, part)
            values = merged
        n = self.batches - self._b_report
        if not self.is_chief or not values and n == 0:
            self._call("on_training_workload_end", {}, {})
            self.context._tensorboard_report("training", self.batches, {})
            self._mark_report()
            return
        metrics = {k: math.fsum(v) / len(v) for k, v in sorted(values.items()) if v}
        self.core.train.report_training_metrics(self.batches, metrics)
        self.context._tensorboard_report("training", self.batches, metrics)
        self._call("on_training_workload_end", metrics, {})
        self.result.training.append((self.batches, metrics))
        op.report_progress(op.length * min(self.batches / max(target, 1), 1.0))
        elapsed = time.monotonic() - self._t_report
        rate = f", {n / elapsed:.1f} batches/s" if elapsed > 0 and n > 0 else ""
        shown = ", ".join(f"{k}={v:.6g}" for k, v in metrics.items())
        logger.info("batch %d: %s%s", self.batches, shown, rate)
        self._mark_report()

    def _mark_report(self) -> None:
        self._t_report = time.monotonic()
        self._b_report = self.batches

    # -- validation -------------------------------------------------------------------------
    def _validate(self) -> dict[str, float]:
        if self.last_validation is not None and self.last_validation[0] == self.batches:
            return self.last_validation[1]
        t0 = time.monotonic()
        self._call("on_validation_start")
        self._call("on_validation_epoch_start")
        reducers = [r for r in self.context.reducers if r.for_validation]
        for r in reducers:
            r.reset()
        models = self.context.models
        for m in models:
            m.eval()
            if hasattr(m, "require_forward_param_sync"):
                # DDP would broadcast buffers in forward; workers may have unequal batch counts.
                m.require_forward_param_sync = False  # type: ignore[assignment]
        try:
            with torch.no_grad():
                sums, weights = self._evaluate_batches()
        finally:
            for m in models:
                m.train()
        parts = [(sums, weights)]
        if self.dist.size > 1:
            parts = self.dist.allgather((sums, weights))
        all_sums: dict[str, list[float]] = {}
        all_weights: dict[str, list[float]] = {}
        for part_sums, part_weights in parts:
            all_sums = merge_lists(all_sums, part_sums)
            all_weights = merge_lists(all_weights, part_weights)
        metrics = {k: math.fsum(v) / math.fsum(all_weights[k]) for k, v in sorted(all_sums.items())}
        for r in reducers:
            own = r.reducer.per_slot_reduce()
            slots = self.dist.allgather(own) if self.dist.size > 1 else [own]
            r.merge_into(metrics, slots, self.is_chief)
        if reducers and self.dist.size > 1:
            metrics = self.dist.broadcast(metrics)
        self.last_validation = (self.batches, metrics)
        if self.is_chief:
            self.core.train.report_validation_metrics(self.batches, metrics)
            self.context._tensorboard_report("validation", self.batches, metrics)
            self.result.validation.append((self.batches, metrics))
            shown = ", ".join(f"{k}={v:.6g}" for k, v in metrics.items())
            logger.info(
                "validation at batch %d (%.2f s): %s", self.batches, time.monotonic() - t0, shown
            )
        self._call("on_validation_end", metrics)
        self._call("on_validation_epoch_end", [])
        return metrics

    def _evaluate_batches(self) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """Every validation batch of this worker: each metric's value × batch length, and the
        lengths (the weights of the average)."""
        sums: dict[str, list[float]] = {}
        weights: dict[str, list[float]] = {}
        device = None if self._on_cpu else self.context.device
        for idx, batch in enumerate(self.val_loader.epoch(0, 0)):
            if device is not None:
                batch = to_device(batch, device)
            out = (
                self.trial.evaluate_batch(batch, idx)  # type: ignore[call-arg]
                if self._eval_takes_idx
                else self.trial.evaluate_batch(batch)
            )
            w = float(self.trial.get_batch_length(batch))
            add_weighted(sums, weights, out, w)
        return sums, weights

    # -- checkpoints ------------------------------------------------------------------------
    def _checkpoint(self) -> None:
        _checkpoints.store(self)

    def _restore(self, uuid: str) -> None:
        _checkpoints.restore(self, uuid)


def add_weighted(
    sums: dict[str, list[float]], weights: dict[str, list[float]], out: Any, w: float
) -> None:
    for k, v in (out or {}).items():
        val = float(v.item() if isinstance(v, torch.Tensor) else v)
        sums.setdefault(k, []).append(val * w)
        weights.setdefault(k, []).append(w)


def build_trial(trial_class: type[PyTorchTrial], context: PyTorchTrialContext) -> PyTorchTrial:
    """`trial_class(context)`, or `trial_class(context, hparams)` when its __init__ takes them
    (Determined 0.38's Trainer tutorial form)."""
    params = [
        p
        for p in list(inspect.signature(trial_class.__init__).parameters.values())[1:]
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(params) >= 2:
        return trial_class(context, context.get_hparams())
    return trial_class(context)
