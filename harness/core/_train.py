"""`core_context.train`: report metrics and progress (queued; see `_shipper`)."""

from __future__ import annotations

import enum
import logging
from typing import Any

from harness.api.client import Client
from harness.core._distributed import DistributedContext
from harness.core._shipper import MetricsShipper

logger = logging.getLogger("harness.core.train")

GROUPS = ("training", "validation")


class EarlyExitReason(enum.Enum):
    INVALID_HP = "INVALID_HP"
    USER_REQUESTED_STOP = "USER_REQUESTED_STOP"
    ERRORED = "ERRORED"


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
    ) -> None:
        self._shipper = shipper
        self._dist = distributed
        self._client = client
        self._trial_id = trial_id

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Queue one report; returns immediately (no network I/O)."""
        if group not in GROUPS:
            raise ValueError(f"metric group must be one of {GROUPS}, not {group!r}")
        _check(steps_completed, metrics)
        if self._dist.rank != 0:
            return
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

    def set_status(self, status: str) -> None:
        """Determined shows this in its web UI; here it goes to the trial's log."""
        logger.info("status: %s", status)

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every queued report reached the master."""
        return True if self._shipper is None else self._shipper.flush(timeout)
