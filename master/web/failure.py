"""What a failed trial's page and its experiment's page say about the failure."""

from __future__ import annotations

from typing import Any

from master.models import Trial
from master.services.trial.trial_views import tail_logs
from master.states import State
from master.web.log_levels import error_lines

FAILURE_SCAN = 500  # a failed trial's newest lines searched for the error that ended it
MAX_FAILED_SHOWN = 3  # an experiment's page summarises at most this many failed trials


def failure_summary(t: Trial) -> dict[str, Any] | None:
    """A failed trial's exit reason and the lines of its log that explain it (the last
    traceback, else the last error lines), as Determined's web UI and CLI summarise a failure;
    None for a trial that did not fail."""
    if t.state != State.ERROR:
        return None
    tail = [line["line"] for line in tail_logs(t.id, FAILURE_SCAN)]
    return {
        "trial_id": t.id,
        "exit_reason": t.exit_reason,
        "lines": error_lines(tail),
        "scanned": len(tail),
    }


def failures(trials: list[Trial]) -> tuple[list[dict[str, Any]], int]:
    """The summaries of the first failed trials, and how many failed in all."""
    failed = [t for t in trials if t.state == State.ERROR]
    shown = [failure_summary(t) for t in failed[:MAX_FAILED_SHOWN]]
    return [f for f in shown if f is not None], len(failed)
