"""Metrics a restored trial re-does are superseded, as in Determined.

A trial that runs again resumes from its latest checkpoint (or from the start), so whatever its
earlier runs reported past that checkpoint's step count will be reported again. Those rows are
marked `superseded` when the new run is allocated: kept for audit (`GET
/trials/{id}/metrics?superseded=true`), hidden from series, names, best metrics and the searcher,
so a re-executed step is never counted twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from sqlalchemy import CursorResult, select, update

from master.db import db
from master.models import Checkpoint, Experiment, Metric, Trial


def resume_steps(trial: Trial) -> int:
    """The step count the trial's next run starts from: its latest checkpoint's, else 0."""
    if not trial.latest_checkpoint:
        return 0
    steps = db.session.execute(
        select(Checkpoint.steps_completed).where(Checkpoint.uuid == trial.latest_checkpoint)
    ).scalar_one_or_none()
    return int(steps or 0)


def supersede_for_resume(trial: Trial) -> int:
    """Mark what earlier runs reported past the resume point; returns the rows marked. Called in
    the transaction that creates the trial's allocation (before its run reports anything)."""
    kept = resume_steps(trial)
    result: CursorResult[Any] = db.session.execute(  # type: ignore[assignment]
        update(Metric)
        .where(
            Metric.trial_id == trial.id,
            Metric.steps_completed > kept,
            Metric.superseded.is_(False),
        )
        .values(superseded=True)
        .execution_options(synchronize_session=False)
    )
    marked = result.rowcount
    if not marked:
        return 0
    trial.steps_completed = min(trial.steps_completed, kept)
    trial.latest_validation = _latest_validation(trial.id)
    if trial.searcher_completed == 0:
        # Its best came from validations (Determined 0.38's rule without completed
        # operations): recomputed from the rows that still count.
        _recompute_best(trial)
    return int(marked)


def _latest_validation(trial_id: int) -> dict | None:
    row = db.session.execute(
        select(Metric.steps_completed, Metric.metrics)
        .where(
            Metric.trial_id == trial_id,
            Metric.group == "validation",
            Metric.superseded.is_(False),
        )
        .order_by(Metric.steps_completed.desc(), Metric.id.desc())
        .limit(1)
    ).first()
    return None if row is None else {"steps_completed": row[0], **row[1]}


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def best_of(values: list[float], smaller_is_better: bool) -> float | None:
    """Pure: the best of some searcher-metric values."""
    if not values:
        return None
    return min(values) if smaller_is_better else max(values)


def _recompute_best(trial: Trial) -> None:
    exp: Experiment = trial.experiment
    name = exp.conf.searcher.metric
    smaller = exp.conf.searcher.smaller_is_better
    rows: Iterable[dict[str, Any]] = db.session.execute(
        select(Metric.metrics).where(
            Metric.trial_id == trial.id,
            Metric.group == "validation",
            Metric.superseded.is_(False),
        )
    ).scalars()
    values = [v for m in rows if (v := _number(m.get(name))) is not None]
    trial.best_validation = best_of(values, smaller)
    db.session.flush()
    trials = db.session.execute(
        select(Trial.id, Trial.best_validation).where(
            Trial.experiment_id == exp.id, Trial.best_validation.is_not(None)
        )
    ).all()
    best = best_of([b for _, b in trials if b is not None], smaller)
    exp.best_validation = best
    exp.best_trial_id = next((tid for tid, b in trials if b == best), None)
