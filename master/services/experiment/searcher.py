"""Applying a searcher's operations to an experiment's trials, persisting its state each time."""

from __future__ import annotations

import math
from collections import deque

from sqlalchemy import select

from master.db import db
from master.models import Checkpoint, Experiment, Trial
from master.searcher import (
    Close,
    Create,
    ExitedReason,
    Operation,
    SearchMethod,
    Shutdown,
    ValidateAfter,
    make_searcher,
)
from master.searcher.base import Resume, Stop
from master.services.task.allocations import live_allocation, request_preemption
from master.services.task.tasks import create_trial_task
from master.services.transitions import (
    born,
    continue_trial_state,
    set_experiment_state,
    set_trial_state,
)
from master.states import CheckpointState, State, is_terminal


def load_searcher(exp: Experiment) -> SearchMethod:
    method = make_searcher(exp.conf, exp.seed)
    if exp.searcher_state is not None:
        method.restore(exp.searcher_state)
    return method


def _trial_by_request(exp: Experiment, request_id: str) -> Trial | None:
    return db.session.execute(
        select(Trial).where(Trial.experiment_id == exp.id, Trial.request_id == request_id)
    ).scalar_one_or_none()


def apply_operations(exp: Experiment, method: SearchMethod, ops: list[Operation]) -> None:
    """Carry out `ops` (and whatever the searcher asks in reaction), then snapshot the searcher.

    The snapshot is written in the same transaction as the trials it created, so a master
    restart never loses or duplicates a trial.
    """
    queue: deque[Operation] = deque(ops)
    while queue:
        op = queue.popleft()
        if isinstance(op, Create):
            if _trial_by_request(exp, op.request_id) is None:
                state = State.PAUSED if exp.state == State.PAUSED else State.ACTIVE
                new = Trial(
                    experiment_id=exp.id,
                    request_id=op.request_id,
                    state=state,
                    hparams=op.hparams,
                    seed=op.seed,
                    # Warm start (`det experiment continue`, searcher.source_checkpoint_uuid):
                    # the trial starts from that checkpoint (DET_LATEST_CHECKPOINT).
                    latest_checkpoint=exp.conf.searcher.source_checkpoint_uuid,
                )
                db.session.add(new)
                db.session.flush()
                born("trial", new.id, state, f"created by the searcher ({op.request_id})")
                create_trial_task(new, exp)
            queue.extend(method.on_trial_created(op.request_id))
        elif isinstance(op, ValidateAfter):
            trial = _trial_by_request(exp, op.request_id)
            if trial is not None and not is_terminal(trial.state):
                trial.searcher_target = max(trial.searcher_target, op.length)
                trial.closing = False
        elif isinstance(op, Close):
            trial = _trial_by_request(exp, op.request_id)
            if trial is None or is_terminal(trial.state):
                continue
            trial.closing = True
            if (
                live_allocation(trial.id) is None
                and trial.searcher_completed >= trial.searcher_target
            ):
                set_trial_state(trial, State.COMPLETED, "the searcher closed it")
                queue.extend(method.on_trial_closed(op.request_id))
        elif isinstance(op, Stop):
            # Stop early (time_metric form): no more work; a running trial gets the
            # preemption signal, checkpoints and exits, and then completes.
            trial = _trial_by_request(exp, op.request_id)
            if trial is None or is_terminal(trial.state):
                continue
            trial.closing = True
            trial.searcher_target = trial.searcher_completed
            alloc = live_allocation(trial.id)
            if alloc is None:
                set_trial_state(trial, State.COMPLETED, "the searcher stopped it early")
                queue.extend(method.on_trial_closed(op.request_id))
            else:
                request_preemption(alloc, trial.id)
        elif isinstance(op, Resume):
            queue.extend(_resume(exp, method, op.request_id))
        elif isinstance(op, Shutdown) and exp.state in (State.ACTIVE, State.PAUSED):
            if op.failure:
                set_experiment_state(exp, State.STOPPING_ERROR, "the searcher failed")
            else:
                set_experiment_state(exp, State.STOPPING_COMPLETED, "the searcher is done")
    exp.searcher_state = method.snapshot()


def _resume(exp: Experiment, method: SearchMethod, request_id: str) -> list[Operation]:
    """A continued search's trial gets its slot: it trains on (see `reopen_trial`)."""
    trial = _trial_by_request(exp, request_id)
    if trial is None or exp.state not in (State.ACTIVE, State.PAUSED):
        return []  # a stopping experiment: a later continue takes it up again
    if resume_blocker(trial) is not None:
        # Its latest checkpoint was deleted since the continue: resuming would start it over.
        # It stays ended, and the search goes on without it.
        return method.on_trial_exited_early(request_id, ExitedReason.ERRORED)
    reopen_trial(trial, exp)
    return []


def reopen_trial(trial: Trial, exp: Experiment) -> None:
    """An ended trial trains on (`det experiment continue`): ACTIVE again (PAUSED with a paused
    experiment), asked for a fresh operation; its script resumes at the steps its checkpoint
    holds, as in Determined. Its id, metrics and checkpoints stay."""
    if not is_terminal(trial.state):
        return  # live already
    why = "continued by the user"
    continue_trial_state(trial, why)
    if exp.state == State.PAUSED:
        set_trial_state(trial, State.PAUSED, "its experiment is paused")
    trial.searcher_target = trial.searcher_completed = 0
    trial.closing = False
    trial.progress = 0.0


def resume_blocker(trial: Trial) -> str | None:
    """Why the trial cannot train on from where it was: its latest checkpoint is gone (it would
    silently start over). None when it can."""
    uuid = trial.latest_checkpoint
    if uuid is None:
        return None
    ckpt = db.session.get(Checkpoint, uuid)
    if ckpt is not None and ckpt.state != CheckpointState.ACTIVE:
        return (
            f"the trial's latest checkpoint {uuid} is {ckpt.state.value}; "
            "continuing would start it over"
        )
    return None


def searcher_validation_metrics(exp: Experiment, trial: Trial, reports: list[dict]) -> None:
    """Let the searcher see every validation report (the time_metric form stops losers)."""
    method = load_searcher(exp)
    ops: list[Operation] = []
    for r in reports:
        ops.extend(method.on_validation_metrics(trial.request_id, r["metrics"], r["steps"]))
    apply_operations(exp, method, ops)


def searcher_exited_early(exp: Experiment, trial: Trial, reason: ExitedReason) -> None:
    method = load_searcher(exp)
    apply_operations(exp, method, method.on_trial_exited_early(trial.request_id, reason))


def searcher_trial_closed(exp: Experiment, trial: Trial) -> None:
    method = load_searcher(exp)
    apply_operations(exp, method, method.on_trial_closed(trial.request_id))


def searcher_trial_exited_ok(exp: Experiment, trial: Trial) -> None:
    """A trial (already COMPLETED) exited 0 without finishing its searcher operation.

    Determined 0.38: the searcher metric then comes from the trial's reported validations (the
    latest one carrying the metric, else its best); a trial that reported none counts as the
    worst result, so the search goes on and still ends COMPLETED.
    """
    method = load_searcher(exp)
    ops: list[Operation] = []
    if trial.searcher_completed < trial.searcher_target:
        metric = validation_metric(exp, trial)
        if metric is None:
            metric = math.inf if exp.conf.searcher.smaller_is_better else -math.inf
        ops.extend(method.on_validation_completed(trial.request_id, metric, trial.searcher_target))
        trial.searcher_completed = trial.searcher_target
    ops.extend(method.on_trial_closed(trial.request_id))
    apply_operations(exp, method, ops)


def validation_metric(exp: Experiment, trial: Trial) -> float | None:
    """The searcher metric of the trial's latest validation, else its best one."""
    name = exp.conf.searcher.metric
    latest = (trial.latest_validation or {}).get(name)
    if isinstance(latest, int | float) and not isinstance(latest, bool) and math.isfinite(latest):
        return float(latest)
    return trial.best_validation


def update_progress(exp: Experiment) -> None:
    method = load_searcher(exp)
    # Four columns, not the Trial objects: this runs on every completion and exit, and a large
    # search has thousands of trials.
    rows = db.session.execute(
        select(
            Trial.request_id, Trial.searcher_completed, Trial.progress, Trial.searcher_target
        ).where(Trial.experiment_id == exp.id)
    ).all()
    lengths = {
        # `progress` is the fraction of the current operation (0..1) the trial last reported.
        rid: float(max(completed, min(progress, 1.0) * target))
        for rid, completed, progress, target in rows
    }
    try:
        exp.progress = max(0.0, min(1.0, float(method.progress(lengths))))
    except (ZeroDivisionError, ValueError):
        pass
