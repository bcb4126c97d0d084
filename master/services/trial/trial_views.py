"""Reads for people looking at trials: log tails and search, log export, learning curves.

The web pages use these next to the REST API's own services (logs.read_logs, metrics.*).
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import select

from master.db import db
from master.errors import BadRequest, NotFound
from master.models import TaskLog, Trial
from master.services.trial.chart_series import chart_metric_names, chart_series
from master.services.trial.logs import log_line_json, read_logs
from master.services.trial.metrics import GROUPS


def tail_logs(
    trial_id: int, limit: int, *, contains: str | None = None, before: int | None = None
) -> list[dict]:
    """The newest `limit` lines (before sequence number `before`), oldest first.

    `contains` keeps only lines with that text (case-insensitive).
    """
    q = select(TaskLog).where(TaskLog.trial_id == trial_id)
    if before is not None:
        q = q.where(TaskLog.id < before)
    if contains:
        escaped = contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        q = q.where(TaskLog.line.ilike(f"%{escaped}%", escape="\\"))
    rows = list(db.session.execute(q.order_by(TaskLog.id.desc()).limit(limit)).scalars())
    return [log_line_json(r) for r in reversed(rows)]


def iter_log_text(trial_id: int, batch: int = 5000) -> Iterator[str]:
    """Every line of a trial's log as text (for a download), read in batches."""
    after = 0
    while True:
        rows = read_logs(trial_id, after, batch)
        if not rows:
            return
        yield "".join(f"{r['timestamp']} [{r['stream']}] {r['line']}\n" for r in rows)
        after = rows[-1]["seq"]


def trials_by_ids(trial_ids: list[int]) -> list[Trial]:
    """The trials in the order asked; 404 naming the first that does not exist."""
    rows = {
        t.id: t for t in db.session.execute(select(Trial).where(Trial.id.in_(trial_ids))).scalars()
    }
    missing = [i for i in trial_ids if i not in rows]
    if missing:
        raise NotFound(f"trial {missing[0]} not found")
    return [rows[i] for i in trial_ids]


def experiment_metric_names(trials: list[Trial], sample: int = 5) -> dict[str, list[str]]:
    """Metric names per group reported by an experiment's first few trials (and any trial's
    latest validation), without reading every metric row of a large experiment."""
    out: dict[str, set[str]] = {g: set() for g in GROUPS}
    for t in trials[:sample]:
        for group, names in chart_metric_names(t.id).items():
            out[group].update(names)
    for t in trials:
        if t.latest_validation:
            out["validation"].update(k for k in t.latest_validation if k != "steps_completed")
    return {g: sorted(v) for g, v in out.items()}


def learning_curves(
    trials: list[Trial], group: str, metric: str, max_points: int = 400, max_trials: int = 100
) -> dict[int, dict[str, list]]:
    """trial id -> {"steps", "values"} of one metric, downsampled per trial (first trials)."""
    if group not in GROUPS:
        raise BadRequest("group must be 'training' or 'validation'", path="group")
    if not metric:
        raise BadRequest("metric is required", path="metric")
    out: dict[int, dict[str, list]] = {}
    for t in trials[:max_trials]:
        series, _ = chart_series(t.id, group, [metric], max_points)
        if series[metric]["steps"]:
            out[t.id] = series[metric]
    return out
