"""The trial state machine: searcher reports, early exits, and what an allocation's exit means."""

from __future__ import annotations

import math
import time
from typing import Any

from sqlalchemy import select

from master.context import master_state, state_lock
from master.db import db, iso
from master.errors import BadRequest, Conflict, NotFound
from master.models import Allocation, Experiment, Trial
from master.notify import hub, logs_key, notify_after_commit, trial_key
from master.searcher import ExitedReason
from master.services.experiment.experiments import maybe_finish
from master.services.experiment.searcher import (
    apply_operations,
    load_searcher,
    searcher_exited_early,
    searcher_trial_closed,
    searcher_trial_exited_ok,
    update_progress,
)
from master.services.task.allocations import live_allocation
from master.services.transitions import set_trial_state
from master.services.trial.logs import write_master_line
from master.states import (
    LIVE_ALLOCATION,
    State,
    is_terminal,
    trial_display_state,
)
from master.trial_exits import ExitFacts, Outcome, decide, final_state


def get_trial(trial_id: int) -> Trial:
    trial = db.session.get(Trial, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def current_operation(trial_id: int, told_process: bool = True) -> dict[str, Any]:
    with state_lock():
        trial = get_trial(trial_id)
        work = trial.state == State.ACTIVE and trial.searcher_target > trial.searcher_completed
        # What the live process was told decides what its exit 0 means (trial_exits.decide).
        alloc = live_allocation(trial.id) if told_process else None
        if alloc is not None and alloc.out_of_work == work:
            alloc.out_of_work = not work
            db.session.commit()
        if work:
            return {"operation": {"length": trial.searcher_target}, "completed": False}
    # No work right now: the process exits and frees its slots. If the searcher later wants more
    # of this trial (a promotion, even one made before this exit is seen), it is scheduled
    # again and resumes from its checkpoint.
    return {"operation": None, "completed": True}


def complete_operation(trial_id: int, length: Any, metric: Any) -> None:
    if not isinstance(length, int) or isinstance(length, bool):
        raise BadRequest("length must be an integer", path="length")
    metric = _as_float(metric)
    with state_lock():
        trial = get_trial(trial_id)
        if 0 < length <= trial.searcher_completed:
            # A retried request (its reply lost in a master restart): already recorded, even
            # when the searcher has since asked for more.
            return
        if length != trial.searcher_target:
            raise Conflict(
                f"trial {trial_id} was asked to train to {trial.searcher_target}, "
                f"not {length}; report_completed belongs to the current operation"
            )
        exp = trial.experiment
        trial.searcher_completed = length
        smaller = exp.conf.searcher.smaller_is_better
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
    smaller = exp.conf.searcher.smaller_is_better

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
    with state_lock():
        trial = get_trial(trial_id)
        trial.exit_reason = why.value
        db.session.commit()


def set_progress(trial_id: int, progress: float) -> None:
    """Record a trial's progress; the experiment's is recomputed at most once a second."""
    trial = get_trial(trial_id)
    trial.progress = float(progress)
    now = time.monotonic()
    progress_at = master_state().scheduling.progress_at
    if now - progress_at.get(trial.experiment_id, 0.0) >= 1.0:
        progress_at[trial.experiment_id] = now
        with state_lock():
            update_progress(trial.experiment)
            # Committed before the lock is let go: this transaction holds the trial's row (its
            # query flushed it) and is about to write the experiment's. A kill that took the lock
            # next writes them in the other order, and PostgreSQL would abort one of the two.
            db.session.commit()
        return
    db.session.commit()


def trial_allocation_exited(alloc: Allocation, exit_code: int | None, error: str | None) -> None:
    """Decide what a trial's ended allocation means for the trial (`tasks.allocation_exited`
    has recorded the exit and freed the slots). Caller holds the state lock."""
    assert alloc.trial_id is not None
    trial = db.session.get(Trial, alloc.trial_id)
    assert trial is not None
    exp = trial.experiment
    notify_after_commit(trial_key(trial.id), logs_key(trial.id))
    facts = ExitFacts(
        trial_state=State(trial.state),
        exit_code=exit_code,
        error=error,
        cause=alloc.exit_cause,
        invalid_hp=trial.exit_reason == ExitedReason.INVALID_HP,
        closing=trial.closing,
        trained_enough=trial.searcher_completed >= trial.searcher_target,
        experiment_completing=exp.state == State.STOPPING_COMPLETED,
        preempt_requested=alloc.preempt_requested,
        kill_requested=alloc.kill_requested,
        restarts=trial.restarts,
        max_restarts=exp.conf.max_restarts,
        out_of_work=alloc.out_of_work,
    )
    _apply_outcome(exp, trial, alloc, facts, decide(facts))
    maybe_finish(exp)
    update_progress(exp)


def unmanaged_exited(trial_id: int, exit_code: int, error: str | None) -> Trial:
    """An unmanaged trial's script ended (`core_v2.close()`): judged as a process exit with no
    restarts (the master cannot start the script again). Exit 0 is COMPLETED, as in 0.38."""
    with state_lock():
        trial = get_trial(trial_id)
        exp = trial.experiment
        if not is_unmanaged(exp):
            raise BadRequest(
                f"trial {trial_id} is not unmanaged: its allocation reports how it ended",
                path="trial_id",
            )
        if is_terminal(trial.state):
            raise Conflict(f"trial {trial_id} has already ended ({trial.state.value})")
        facts = ExitFacts(
            trial_state=State(trial.state),
            exit_code=exit_code,
            error=error,
            cause=None,
            invalid_hp=trial.exit_reason == ExitedReason.INVALID_HP,
            closing=trial.closing,
            trained_enough=trial.searcher_completed >= trial.searcher_target,
            experiment_completing=exp.state == State.STOPPING_COMPLETED,
            preempt_requested=False,
            kill_requested=False,
            restarts=0,
            max_restarts=0,
        )
        _apply_outcome(exp, trial, None, facts, decide(facts))
        maybe_finish(exp)
        update_progress(exp)
        db.session.commit()
    hub().notify(trial_key(trial.id), logs_key(trial.id))
    return trial


def _describe(exit_code: int | None, error: str | None) -> str:
    if error and exit_code is not None:
        return f"exit code {exit_code}: {error}"
    return f"exit code {exit_code}" if exit_code is not None else (error or "unknown")


def _apply_outcome(
    exp: Experiment, trial: Trial, alloc: Allocation | None, facts: ExitFacts, outcome: Outcome
) -> None:
    describe = _describe(facts.exit_code, facts.error)
    if outcome == Outcome.RESTART:
        trial.restarts += 1  # restarts counts restarts; the final failure is not one
    line = {
        Outcome.STOPPED: f"trial stopped ({describe})",
        Outcome.PAUSED: f"trial paused ({describe})",
        Outcome.INVALID_HP: "trial exited early: invalid hyperparameters",
        Outcome.COMPLETED: "trial completed",
        Outcome.EXITED_OK: "trial completed (the process exited 0)",
        Outcome.WAIT_FOR_SEARCHER: "trial is waiting for the searcher",
        Outcome.PREEMPTED: "trial preempted; it will resume from its checkpoint",
        Outcome.REQUEUE: f"{facts.error or describe}; the trial will resume elsewhere",
        Outcome.KILLED: f"trial killed ({describe})",
        Outcome.FAILED: (
            f"trial failed ({describe}); max_restarts={facts.max_restarts} reached, trial is ERROR"
        ),
    }.get(outcome)
    if outcome == Outcome.RESTART:
        where = f"checkpoint {trial.latest_checkpoint}" if trial.latest_checkpoint else "the start"
        line = (
            f"trial failed ({describe}); restart {trial.restarts} of {facts.max_restarts} "
            f"from {where}"
        )
    if outcome == Outcome.FAILED:
        trial.exit_reason = f"failed {trial.restarts + 1} times; last: {describe}"
    dst = final_state(outcome, facts.trial_state)
    if dst is not None:
        set_trial_state(trial, dst, line or describe)
    if line:
        write_master_line(trial.id, alloc, line)
    if outcome == Outcome.INVALID_HP:
        searcher_exited_early(exp, trial, ExitedReason.INVALID_HP)
    elif outcome == Outcome.COMPLETED:
        searcher_trial_closed(exp, trial)
    elif outcome == Outcome.EXITED_OK:
        searcher_trial_exited_ok(exp, trial)
    elif outcome == Outcome.KILLED:
        searcher_exited_early(exp, trial, ExitedReason.USER_CANCELED)
    elif outcome == Outcome.FAILED:
        searcher_exited_early(exp, trial, ExitedReason.ERRORED)


def trial_json(trial: Trial, alloc: Allocation | None = None, *, lookup: bool = True) -> dict:
    if alloc is None and lookup and not is_terminal(trial.state):
        alloc = live_allocation(trial.id)
    return {
        "id": trial.id,
        "experiment_id": trial.experiment_id,
        "request_id": trial.request_id,
        "state": trial.state.value,
        "display_state": trial_display_state(
            trial.state, alloc.state if alloc else None, is_unmanaged(trial.experiment)
        ),
        "waiting_for": waiting_for(trial, alloc),
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


def trials_json(trials: list[Trial]) -> list[dict]:
    """`trial_json` for many trials, their live allocations read in one query (not one each)."""
    live = [t.id for t in trials if not is_terminal(t.state)]
    allocs: dict[int, Allocation] = {}
    if live:
        rows = db.session.execute(
            select(Allocation).where(
                Allocation.trial_id.in_(live), Allocation.state.in_(LIVE_ALLOCATION)
            )
        ).scalars()
        allocs = {a.trial_id: a for a in rows if a.trial_id is not None}
    return [trial_json(t, allocs.get(t.id), lookup=False) for t in trials]


def is_unmanaged(exp: Experiment) -> bool:
    return exp.conf.unmanaged


def waiting_for(trial: Trial, alloc: Allocation | None) -> str | None:
    """What an ACTIVE trial with no live allocation waits for when it is not queued for a slot:
    it finished the searcher's operation (an ASHA rung) and is neither closed nor given more
    work yet, so it waits for the searcher to promote it (it shows QUEUED otherwise). An
    unmanaged trial waits for nothing: its script runs outside the cluster."""
    if trial.state != State.ACTIVE or alloc is not None or trial.closing:
        return None
    if is_unmanaged(trial.experiment):
        return None
    return "promotion" if trial.searcher_completed >= trial.searcher_target else None


def trials_of(exp_id: int) -> list[Trial]:
    return list(
        db.session.execute(
            select(Trial).where(Trial.experiment_id == exp_id).order_by(Trial.id)
        ).scalars()
    )
