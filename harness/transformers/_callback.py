"""`DetCallback`: a Hugging Face `Trainer` callback that reports to a detlab trial, as Determined
0.38's does (same constructor, same behaviour):

- **metrics**: each `Trainer` log is reported at `state.global_step`: logs with `eval_` keys as
  validation metrics, the others as training metrics (numbers only; `filter_metrics` keeps only
  the names it lists). The run's closing summary (`train_runtime`, ...) lands on the last step's
  training report, merged with what that step reported already.
- **checkpoints**: each `checkpoint-N` directory the Trainer saves is uploaded as a detlab
  checkpoint with `steps_completed: N`, the trial id and `user_data` as metadata.
- **resume**: when the trial has a latest checkpoint (pause, preemption, `det e continue`), it is
  downloaded into `args.output_dir/checkpoint-N` and `args.resume_from_checkpoint` points there;
  the script passes it on: `trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)`.
- **preemption**: when the master asks (pause, scheduler), the Trainer saves at the end of the
  step, the checkpoint is uploaded and the process exits 0, so the trial resumes from it later.
- **searcher length**: when the config still sets `searcher.max_length` (the legacy form that
  ASHA rungs use), its operation sets `args.max_steps` (batches) or `args.num_train_epochs`
  (epochs), and the operation is completed with the searcher metric of the last evaluation.
"""

from __future__ import annotations

import logging
import math
import tempfile
from pathlib import Path
from typing import Any

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "determined.transformers needs the Hugging Face transformers package "
        "(pip install 'detlab[hf]'); it is not installed in this trial's environment"
    ) from e

import harness
from harness.core._searcher import SearcherOperation

logger = logging.getLogger("harness.transformers")

EVAL_PREFIX = "eval_"


def split_logs(logs: dict[str, Any], keep: list[str] | None) -> tuple[str, dict[str, float]]:
    """("validation" | "training", the numeric metrics of one Trainer log). Pure."""
    group = "validation" if any(k.startswith(EVAL_PREFIX) for k in logs) else "training"
    metrics = {
        k: float(v)
        for k, v in logs.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and (keep is None or k in keep)
    }
    return group, metrics


def legacy_length(config: dict[str, Any]) -> tuple[str, int] | None:
    """(unit, length) of a config's `searcher.max_length`, or None when it sets none. Pure."""
    max_length = (config.get("searcher") or {}).get("max_length")
    if not max_length:
        return None
    if isinstance(max_length, int):
        return "batches", max_length
    ((unit, length),) = max_length.items()
    return str(unit), int(length)


class DetCallback(TrainerCallback):
    """`DetCallback(core_context, args, filter_metrics=None, user_data=None)`; add it to the
    Trainer (`callbacks=[...]` or `trainer.add_callback`)."""

    def __init__(
        self,
        core_context: Any,
        args: TrainingArguments,
        filter_metrics: list[str] | None = None,
        user_data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.core_context = core_context
        self.filter_metrics = filter_metrics
        self.user_data = user_data or {}
        self.info = harness.get_cluster_info()
        self.last_train: tuple[int, dict[str, float]] = (-1, {})
        self.last_eval: dict[str, float] = {}
        self.preempted = False
        self.current_op: SearcherOperation | None = None
        self.unit = "batches"
        self.load_last_checkpoint(args)
        self._follow_searcher(args)

    # -- set-up ------------------------------------------------------------------------------
    def load_last_checkpoint(self, args: TrainingArguments) -> None:
        """Download the trial's latest checkpoint for the Trainer to resume from."""
        latest = self.info.latest_checkpoint if self.info else None
        if latest is None:
            return
        steps = int(self.core_context.checkpoint.get_metadata(latest).get("steps_completed", 0))
        dst = Path(args.output_dir or ".") / f"checkpoint-{steps}"
        self.core_context.checkpoint.download(latest, dst)
        args.resume_from_checkpoint = str(dst)
        logger.info("resuming from checkpoint %s (step %d) in %s", latest, steps, dst)

    def _follow_searcher(self, args: TrainingArguments) -> None:
        found = legacy_length(self.info.trial.config) if self.info else None
        if found is None:
            return  # the script's own max_steps / num_train_epochs decide
        unit, _ = found
        self.unit = unit
        if unit not in ("batches", "epochs"):
            raise ValueError(
                f"searcher.max_length in {unit}: DetCallback follows batches (max_steps) or "
                "epochs (num_train_epochs)"
            )
        self.current_op = next(iter(self.core_context.searcher.operations()), None)
        if self.current_op is None:
            return
        if unit == "batches":
            args.max_steps = self.current_op.length
        else:
            args.max_steps = -1
            args.num_train_epochs = self.current_op.length
        logger.info("searcher.max_length: training to %d %s", self.current_op.length, unit)

    # -- Trainer events ----------------------------------------------------------------------
    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs or not state.is_world_process_zero:
            return
        group, metrics = split_logs(logs, self.filter_metrics)
        if not metrics:
            return
        step = state.global_step
        train = self.core_context.train
        if group == "validation":
            self.last_eval = metrics
            train.report_validation_metrics(steps_completed=step, metrics=metrics)
            return
        if self.last_train[0] == step:  # the closing summary: keep the step's earlier metrics
            metrics = {**self.last_train[1], **metrics}
        self.last_train = (step, metrics)
        train.report_training_metrics(steps_completed=step, metrics=metrics)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.current_op is not None and state.max_steps > 0:
            self.current_op.report_progress(state.global_step)
        # A collective with several workers: every rank asks at the same step.
        if self.core_context.preempt.should_preempt():
            self.preempted = True
            control.should_save = True
            control.should_training_stop = True

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        step = state.global_step
        src = Path(args.output_dir or ".") / f"checkpoint-{step}"
        metadata = {"steps_completed": step, **self.user_data}
        if self.info is not None:
            metadata["trial_id"] = self.info.trial.trial_id
        dist = self.core_context.distributed
        if dist.size > 1:  # every worker stores what it saved (its optimizer shard, ...)
            with tempfile.TemporaryDirectory() as empty:
                self.core_context.checkpoint.upload(
                    src if src.is_dir() else empty, metadata, shard=True
                )
        elif src.is_dir():
            self.core_context.checkpoint.upload(src, metadata)
        if self.preempted:
            logger.info("preempted at step %d: checkpoint stored, exiting", step)
            raise SystemExit(0)

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        metrics = kwargs.get("metrics") or {}
        if metrics:
            self.last_eval = split_logs(metrics, None)[1]
        self._maybe_complete(state)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._maybe_complete(state)

    def _maybe_complete(self, state: TrainerState) -> None:
        op = self.current_op
        if op is None or op.completed or not state.is_world_process_zero:
            return
        done = state.epoch if self.unit == "epochs" else state.global_step
        if done is not None and done >= op.length:
            self._complete(op)

    def _complete(self, op: SearcherOperation) -> None:
        """Complete the searcher's operation with the last evaluation's searcher metric (the
        worst value when none was evaluated: the searcher still moves on)."""
        searcher = (self.info.trial.config.get("searcher") or {}) if self.info else {}
        name = searcher.get("metric")
        value = self.last_eval.get(str(name)) if name else None
        if value is None or not math.isfinite(value):
            value = math.inf if searcher.get("smaller_is_better", True) else -math.inf
            logger.warning("no %s evaluated by the end of the operation", name)
        op.report_completed(value)
