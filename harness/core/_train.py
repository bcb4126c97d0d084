"""`core_context.train`: report metrics and progress (queued; see `_shipper`)."""

from __future__ import annotations

import enum
import logging
import pathlib
import time
from collections.abc import Callable
from typing import Any

from harness.api.client import Client
from harness.core._distributed import DistributedContext
from harness.core._shipper import MetricsShipper
from harness.core._tensorboard import (
    AUTO_SYNC_INTERVAL_S,
    MetricWriter,
    TensorboardManager,
    default_mangler,
    local_root,
)

logger = logging.getLogger("harness.core.train")

GROUPS = ("training", "validation")


class EarlyExitReason(enum.Enum):
    INVALID_HP = "INVALID_HP"
    USER_REQUESTED_STOP = "USER_REQUESTED_STOP"
    ERRORED = "ERRORED"


class TensorboardMode(enum.Enum):
    """Determined's `core.TensorboardMode`. AUTO (the default): reported metrics are written as
    TensorBoard events and uploaded with whatever else is in `get_tensorboard_path()`. MANUAL:
    nothing is written or uploaded unless the trial calls `upload_tensorboard_files()`."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


def _check(steps_completed: Any, metrics: Any) -> None:
    # Cheap type checks now, so a mistake fails in the user's frame, not in the shipper thread.
    if not isinstance(steps_completed, int) or isinstance(steps_completed, bool):
        raise TypeError(f"steps_completed must be an int, not {type(steps_completed).__name__}")
    if not isinstance(metrics, dict):
        raise TypeError(f"metrics must be a dict, not {type(metrics).__name__}")


class TrainContext:
    """Metrics and progress of the trial. Only the chief (rank 0) reports; others are no-ops."""

    def __init__(
        self,
        shipper: MetricsShipper | None,
        distributed: DistributedContext,
        client: Client | None = None,
        trial_id: int | None = None,
        tensorboard: TensorboardManager | None = None,
        tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
    ) -> None:
        self._shipper = shipper
        self._dist = distributed
        self._client = client
        self._trial_id = trial_id
        self._tb = tensorboard or TensorboardManager(
            local_root(None, distributed.rank), None, None, None, distributed.rank
        )
        self._tb_mode = tensorboard_mode
        self._tb_writer: MetricWriter | None = None

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Queue one report; returns immediately (no network I/O)."""
        if group not in GROUPS:
            raise ValueError(f"metric group must be one of {GROUPS}, not {group!r}")
        _check(steps_completed, metrics)
        if self._dist.rank != 0:
            return
        if self._tb_mode == TensorboardMode.AUTO and self._tb.uploads:
            # Off a cluster nothing would upload them: no events are written there.
            self._auto_tensorboard(group, steps_completed, metrics)
        if self._shipper is None:
            logger.info("%s metrics at %d steps: %s", group, steps_completed, metrics)
            return
        self._shipper.report(group, steps_completed, metrics)

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        """Queue training metrics (`batch_metrics` is accepted for Determined compatibility)."""
        self.report_metrics("training", steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        self.report_metrics("validation", steps_completed, metrics)

    def report_progress(self, progress: float) -> None:
        """Fraction 0..1 of the trial's work done; coalesced, sent in the background."""
        progress = float(progress)
        if not 0.0 <= progress <= 1.0:
            raise ValueError(f"progress must be between 0 and 1, not {progress}")
        if self._dist.rank != 0:
            return
        if self._shipper is None:
            logger.debug("progress: %.4f", progress)
            return
        self._shipper.set_progress(progress)

    def report_early_exit(self, reason: EarlyExitReason | str) -> None:
        """Tell the master this trial stops on purpose (e.g. invalid hyperparameters)."""
        value = reason.value if isinstance(reason, EarlyExitReason) else str(reason)
        if self._dist.rank != 0:
            return
        if self._client is None or self._trial_id is None:
            logger.info("early exit: %s", value)
            return
        self.flush()
        self._client.report_early_exit(self._trial_id, value)

    def get_experiment_best_validation(self) -> float | None:
        """The best searcher-metric validation reported so far across the experiment (by
        `searcher.smaller_is_better`), or None before the first one."""
        if self._client is None or self._trial_id is None:
            return None  # off the cluster: no experiment
        trial = self._client.get_trial(self._trial_id)
        exp = self._client.get_experiment(int(trial["experiment_id"]))
        best = exp.get("best_validation")
        return None if best is None else float(best)

    def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any] | None:
        raise NotImplementedError(_NOT_YET.format(name="set_metadata()", what="run metadata"))

    def get_metadata(self) -> dict[str, Any] | None:
        raise NotImplementedError(_NOT_YET.format(name="get_metadata()", what="run metadata"))

    # -- TensorBoard (docs/tensorboard.md) -----------------------------------------------------
    def get_tensorboard_path(self) -> pathlib.Path:
        """This worker's local directory for TensorBoard files (uploaded by
        `upload_tensorboard_files()`, and in AUTO mode after reports and at exit)."""
        return self._tb.path

    def upload_tensorboard_files(
        self,
        selector: Callable[[pathlib.Path], bool] = lambda _: True,
        mangler: Callable[[pathlib.Path, int], pathlib.Path] = default_mangler,
    ) -> None:
        """Upload the files of `get_tensorboard_path()` that changed since the last upload to
        checkpoint storage (`selector(path)` picks files, `mangler(relpath, rank)` renames
        them there). Off a cluster there is no trial to file them under: nothing is sent."""
        self._tb.sync(selector, mangler)

    def _tensorboard_uploads(self) -> bool:
        return self._tb.uploads

    def _auto_tensorboard(self, group: str, steps: int, metrics: dict[str, Any]) -> None:
        if self._tb_writer is None:
            self._tb_writer = MetricWriter(self._tb.path)
        self._tb_writer.write(group, steps, metrics)
        if time.monotonic() - self._tb.last_sync >= AUTO_SYNC_INTERVAL_S:
            self._tb_writer.flush()  # what the upload copies (buffered until then)
            self._tb.sync_in_background()

    def _safe_sync(self) -> None:
        # Storage trouble must not kill the training: the next sync retries the same files.
        try:
            self._tb.sync()
        except Exception as e:  # noqa: BLE001 - any backend error, logged
            logger.warning("TensorBoard files could not be uploaded: %s", e)

    def close_tensorboard(self) -> None:
        """At exit: close the metrics writer, upload what is left (AUTO mode)."""
        if self._tb_writer is not None:
            self._tb_writer.close()
        self._tb.stop_background()
        if self._tb_mode == TensorboardMode.AUTO and self._tb.uploads:
            self._safe_sync()

    def set_status(self, status: str) -> None:
        """Determined shows this in its web UI; here it goes to the trial's log."""
        logger.info("status: %s", status)

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every queued report reached the master."""
        return True if self._shipper is None else self._shipper.flush(timeout)


_NOT_YET = (
    "core.train.{name}: detlab does not store {what} yet; metrics go through "
    "report_training_metrics/report_validation_metrics (see docs/determined-compat.md)"
)
