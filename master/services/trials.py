"""The trial state machine: searcher reports, early exits, and what an allocation's exit means."""

from __future__ import annotations

import math
import time
from typing import Any

from sqlalchemy import select

from master.auth import revoke_allocation_tokens
from master.db import db, iso, utcnow
from master.errors import BadRequest, Conflict, NotFound
from master.models import Allocation, Experiment, Slot, Trial
from master.notify import agent_key, hub, logs_key, preempt_key, trial_key
from master.searcher import ExitedReason
from master.services import STATE_LOCK, rendezvous
from master.services.experiments import maybe_finish
from master.services.logs import write_master_line
from master.services.scheduling import PREEMPTION_TIMEOUT, bump_allocation_generation
from master.services.searcher import (
    apply_operations,
    live_allocation,
    load_searcher,
    searcher_exited_early,
    searcher_trial_closed,
    searcher_trial_exited_ok,
    update_progress,
)
from master.states import STOPPING_TO_TERMINAL, State, is_terminal, trial_display_state

# The agent's EXITED error when it was stopped on purpose (agent/runtime: shutdown).
AGENT_SHUTDOWN = "killed because det-agent is shutting down"


def get_trial(trial_id: int) -> Trial:
    trial = db.session.get(Trial, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def current_operation(trial_id: int) -> dict[str, Any]:
    trial = get_trial(trial_id)
    if trial.state == State.ACTIVE and trial.searcher_target > trial.searcher_completed:
        return {"operation": {"length": trial.searcher_target}, "completed": False}
    # No work right now: the process exits and frees its slots. If the searcher later wants more
    # of this trial, it is scheduled again and resumes from its checkpoint.
    return {"operation": None, "completed": True}


def complete_operation(trial_id: int, length: int, metric: Any) -> None:
    if not isinstance(length, int) or isinstance(length, bool):
        raise BadRequest("length must be an integer", path="length")
    metric = _as_float(metric)
    with STATE_LOCK:
        trial = get_trial(trial_id)
        if length != trial.searcher_target:
            raise Conflict(
                f"trial {trial_id} was asked to train to {trial.searcher_target}, "
                f"not {length}; report_completed belongs to the current operation"
            )
        if trial.searcher_completed >= length:
            return  # a retried request: already recorded
        exp = trial.experiment
        trial.searcher_completed = length
        smaller = exp.config.get("searcher", {}).get("smaller_is_better", True)
        if math.isfinite(metric):
            record_searcher_metric(exp, trial, metric)
        else:  # NaN or infinite: the worst possible result, never the best
            metric = math.inf if smaller else -math.inf
        if trial.state == State.ACTIVE or trial.state in (State.PAUSED, State.STOPPING_COMPLETED):
            method = load_searcher(exp)
            ops = method.on_validation_completed(trial.request_id, metric, length)
            apply_operations(exp, method, ops)
        update_progress(exp)
        db.session.commit()


_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _as_float(metric: Any) -> float:
    """A number, or the strings the harness sends for values strict JSON cannot carry."""
    if isinstance(metric, str) and metric in _NON_FINITE:
        return _NON_FINITE[metric]
    if not isinstance(metric, int | float) or isinstance(metric, bool):
        raise BadRequest(
            "searcher_metric must be a number (the value of the searcher's metric)",
            path="searcher_metric",
        )
    return float(metric)


def record_searcher_metric(exp: Experiment, trial: Trial, metric: float) -> None:
    smaller = exp.config.get("searcher", {}).get("smaller_is_better", True)

    def better(a: float, b: float | None) -> bool:
        return b is None or (a < b if smaller else a > b)

    if better(metric, trial.best_validation):
        trial.best_validation = metric
    if better(metric, exp.best_validation):
        exp.best_validation = metric
        exp.best_trial_id = trial.id


def early_exit(trial_id: int, reason: str) -> None:
    try:
        why = ExitedReason(reason)
    except ValueError:
        raise BadRequest(
            f"unknown reason {reason!r}; expected one of "
            + ", ".join(r.value for r in ExitedReason),
            path="reason",
        ) from None
    with STATE_LOCK:
        trial = get_trial(trial_id)
        trial.exit_reason = why.value
        db.session.commit()


_progress_at: dict[int, float] = {}


def set_progress(trial_id: int, progress: float) -> None:
    """Record a trial's progress; the experiment's is recomputed at most once a second."""
    trial = get_trial(trial_id)
    trial.progress = float(progress)
    now = time.monotonic()
    if now - _progress_at.get(trial.experiment_id, 0.0) >= 1.0:
        _progress_at[trial.experiment_id] = now
        with STATE_LOCK:
            update_progress(trial.experiment)
    db.session.commit()


def allocation_exited(alloc: Allocation, exit_code: int | None, error: str | None) -> None:
    """Decide what a finished allocation means for its trial. Caller holds STATE_LOCK, commits."""
    if alloc.state == "TERMINATED":
        return
    now = utcnow()
    alloc.state = "TERMINATED"
    alloc.exit_code = exit_code
    alloc.exit_reason = error or alloc.exit_reason
    alloc.ended_at = now
    db.session.execute(
        Slot.__table__.update().where(Slot.allocation_id == alloc.id).values(allocation_id=None)
    )
    bump_allocation_generation()
    revoke_allocation_tokens(alloc.id)
    rendezvous.forget(alloc.id)
    trial = db.session.get(Trial, alloc.trial_id)
    assert trial is not None
    exp = trial.experiment
    hub.notify(preempt_key(alloc.id), trial_key(trial.id), logs_key(trial.id))
    for agent_id in {alloc.agent_id, *(alloc.containers or {})} - {None, ""}:
        hub.notify(agent_key(agent_id))
    ok = exit_code == 0 and not error
    describe = f"exit code {exit_code}" if exit_code is not None else (error or "unknown")
    if error and exit_code is not None:
        describe = f"exit code {exit_code}: {error}"

    if State(trial.state) in STOPPING_TO_TERMINAL:
        trial.state = STOPPING_TO_TERMINAL[State(trial.state)].value
        trial.ended_at = now
        write_master_line(trial.id, alloc, f"trial stopped ({describe})")
    elif trial.state == State.PAUSED:
        write_master_line(trial.id, alloc, f"trial paused ({describe})")
    elif trial.state == State.ACTIVE:
        if trial.exit_reason == ExitedReason.INVALID_HP and (ok or exit_code is not None):
            trial.state = State.COMPLETED.value
            trial.ended_at = now
            write_master_line(trial.id, alloc, "trial exited early: invalid hyperparameters")
            searcher_exited_early(exp, trial, ExitedReason.INVALID_HP)
        elif (
            trial.closing
            and trial.searcher_completed >= trial.searcher_target
            and (ok or alloc.preempt_requested)
        ):
            # Closed by the searcher (done, or stopped early and killed past the timeout).
            trial.state = State.COMPLETED.value
            trial.ended_at = now
            write_master_line(trial.id, alloc, "trial completed")
            searcher_trial_closed(exp, trial)
        elif ok and trial.searcher_completed >= trial.searcher_target:
            if trial.closing or exp.state == State.STOPPING_COMPLETED:
                trial.state = State.COMPLETED.value
                trial.ended_at = now
                write_master_line(trial.id, alloc, "trial completed")
                searcher_trial_closed(exp, trial)
            else:
                write_master_line(trial.id, alloc, "trial is waiting for the searcher")
        elif alloc.preempt_requested and (ok or alloc.exit_reason == PREEMPTION_TIMEOUT):
            write_master_line(
                trial.id, alloc, "trial preempted; it will resume from its checkpoint"
            )
        elif error and error.startswith(AGENT_SHUTDOWN):
            # Not the trial's fault: requeue it without spending one of its restarts.
            write_master_line(trial.id, alloc, f"{error}; the trial will resume elsewhere")
        elif ok:
            # Determined 0.38: a trial process that exits 0 is COMPLETED, whether or not it used
            # searcher operations; the searcher gets its metric from the reported validations.
            trial.state = State.COMPLETED.value
            trial.ended_at = now
            write_master_line(trial.id, alloc, "trial completed (the process exited 0)")
            searcher_trial_exited_ok(exp, trial)
        else:
            _failed(exp, trial, alloc, describe)
    maybe_finish(exp)
    update_progress(exp)


def _failed(exp: Experiment, trial: Trial, alloc: Allocation, describe: str) -> None:
    max_restarts = int(exp.config.get("max_restarts", 5))
    if alloc.kill_requested:
        trial.state = State.CANCELED.value
        trial.ended_at = utcnow()
        write_master_line(trial.id, alloc, f"trial killed ({describe})")
        searcher_exited_early(exp, trial, ExitedReason.USER_CANCELED)
        return
    trial.restarts += 1
    if describe_is_permanent(describe):
        # Retrying cannot help (the image does not exist or cannot be pulled): fail now.
        max_restarts = min(max_restarts, trial.restarts - 1)
    if trial.restarts > max_restarts:
        trial.state = State.ERROR.value
        trial.ended_at = utcnow()
        trial.exit_reason = f"failed {trial.restarts} times; last: {describe}"
        write_master_line(
            trial.id,
            alloc,
            f"trial failed ({describe}); max_restarts={max_restarts} reached, trial is ERROR",
        )
        searcher_exited_early(exp, trial, ExitedReason.ERRORED)
    else:
        where = f"checkpoint {trial.latest_checkpoint}" if trial.latest_checkpoint else "the start"
        write_master_line(
            trial.id,
            alloc,
            f"trial failed ({describe}); restart {trial.restarts} of {max_restarts} from {where}",
        )


# Failures the agent reports that no restart can fix.
PERMANENT_FAILURES = ("cannot pull the image",)


def describe_is_permanent(describe: str) -> bool:
    return any(marker in describe for marker in PERMANENT_FAILURES)


def finish_allocation(alloc_id: str, exit_code: int | None, error: str | None) -> None:
    with STATE_LOCK:
        alloc = db.session.get(Allocation, alloc_id)
        if alloc is None:
            return
        allocation_exited(alloc, exit_code, error)
        db.session.commit()


def trial_json(trial: Trial, alloc: Allocation | None = None, *, lookup: bool = True) -> dict:
    if alloc is None and lookup and not is_terminal(trial.state):
        alloc = live_allocation(trial.id)
    return {
        "id": trial.id,
        "experiment_id": trial.experiment_id,
        "request_id": trial.request_id,
        "state": trial.state,
        "display_state": trial_display_state(trial.state, alloc.state if alloc else None),
        "hparams": trial.hparams,
        "seed": trial.seed,
        "restarts": trial.restarts,
        "steps_completed": trial.steps_completed,
        "searcher_target": trial.searcher_target,
        "searcher_completed": trial.searcher_completed,
        "progress": trial.progress,
        "best_validation": trial.best_validation,
        "latest_validation": trial.latest_validation,
        "latest_checkpoint": trial.latest_checkpoint,
        "exit_reason": trial.exit_reason,
        "allocation_id": alloc.id if alloc else None,
        "agent_id": alloc.agent_id if alloc else None,
        "created_at": iso(trial.created_at),
        "ended_at": iso(trial.ended_at),
    }


def trials_of(exp_id: int) -> list[Trial]:
    return list(
        db.session.execute(
            select(Trial).where(Trial.experiment_id == exp_id).order_by(Trial.id)
        ).scalars()
    )
