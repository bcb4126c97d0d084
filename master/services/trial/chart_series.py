"""Metric series for charts that open as fast for a 1,000,000-point trial as for a short one.

`metrics.metric_series` (the REST API's) reads every row into Python and keeps each bucket's min
and max: exact, but about a minute for a million rows. Here a long series on PostgreSQL is first
answered with a *strided sample*: one indexed probe per chart point at evenly spaced steps
(`ix_metrics_trial_group_steps`), tens of milliseconds whatever the length. The page then asks for
the exact min/max envelope (`exact=True`), computed by PostgreSQL in one scan (about 1.5 s for a
million rows). Short series (and SQLite) always get `metric_series`' exact answer.
"""

from __future__ import annotations

import math
from typing import Any, cast

from sqlalchemy import ScalarResult, text

from master.db import db
from master.errors import BadRequest
from master.services.trial.metrics import GROUPS, metric_names, metric_series

# Up to this many steps the exact min/max downsampling is fast enough to be the first answer.
EXACT_ROWS = 20_000
NAME_SAMPLE_ROWS = 200

_SAMPLE_SQL = text(
    """
    WITH r AS (
      SELECT (SELECT steps_completed FROM metrics
              WHERE trial_id = :t AND "group" = :g AND NOT superseded
              ORDER BY steps_completed LIMIT 1) AS lo,
             (SELECT steps_completed FROM metrics
              WHERE trial_id = :t AND "group" = :g AND NOT superseded
              ORDER BY steps_completed DESC LIMIT 1) AS hi
    )
    SELECT DISTINCT ON (m.steps_completed) m.steps_completed, m.metrics
    FROM r, generate_series(0, :n - 1) AS i,
    LATERAL (
      SELECT steps_completed, metrics FROM metrics
      WHERE trial_id = :t AND "group" = :g AND NOT superseded
        AND steps_completed >= r.lo + ((r.hi - r.lo) * i) / GREATEST(:n - 1, 1)
      ORDER BY steps_completed LIMIT 1
    ) AS m
    ORDER BY m.steps_completed
    """
)

# Each bucket's smallest and largest value with the step it was reported at (arrays compare
# element by element), in one scan of the series: about 1.5 s for a million rows.
_ENVELOPE_SQL = text(
    """
    WITH r AS (
      SELECT (SELECT steps_completed FROM metrics
              WHERE trial_id = :t AND "group" = :g AND NOT superseded
              ORDER BY steps_completed LIMIT 1) AS lo,
             (SELECT steps_completed FROM metrics
              WHERE trial_id = :t AND "group" = :g AND NOT superseded
              ORDER BY steps_completed DESC LIMIT 1) AS hi
    )
    SELECT width_bucket(m.steps_completed, r.lo, r.hi + 1, :b) AS k,
           min(ARRAY[(m.metrics ->> :name)::float8, m.steps_completed::float8]),
           max(ARRAY[(m.metrics ->> :name)::float8, m.steps_completed::float8])
    FROM metrics m, r
    WHERE m.trial_id = :t AND m."group" = :g AND NOT m.superseded
      AND jsonb_typeof(m.metrics -> :name) = 'number'
    GROUP BY k ORDER BY k
    """
)

_SPAN_SQL = text(
    """
    SELECT (SELECT steps_completed FROM metrics
              WHERE trial_id = :t AND "group" = :g AND NOT superseded
            ORDER BY steps_completed DESC LIMIT 1)
         - (SELECT steps_completed FROM metrics
              WHERE trial_id = :t AND "group" = :g AND NOT superseded
            ORDER BY steps_completed LIMIT 1)
    """
)

_ALL_NAMES_SQL = text(
    "SELECT DISTINCT jsonb_object_keys(metrics) FROM metrics "
    'WHERE trial_id = :t AND "group" = :g AND NOT superseded'
)

_NAMES_SQL = text(
    """
    SELECT DISTINCT jsonb_object_keys(metrics) FROM (
      (SELECT metrics FROM metrics
              WHERE trial_id = :t AND "group" = :g AND NOT superseded
       ORDER BY steps_completed LIMIT :k)
      UNION ALL
      (SELECT metrics FROM metrics
              WHERE trial_id = :t AND "group" = :g AND NOT superseded
       ORDER BY steps_completed DESC LIMIT :k)
    ) AS s
    """
)


def _postgres() -> bool:
    return db.session.get_bind().dialect.name == "postgresql"


def is_long(trial_id: int, group: str) -> bool:
    """Whether the series spans more than EXACT_ROWS steps: two index probes, however long.

    (A series reports about one row per step; one that resumed after failures repeats a few.)
    """
    if not _postgres():
        return False
    span: int | None = db.session.execute(_SPAN_SQL, {"t": trial_id, "g": group}).scalar_one()
    return span is not None and int(span) > EXACT_ROWS


def chart_series(
    trial_id: int, group: str, names: list[str], max_points: int, *, exact: bool = False
) -> tuple[dict[str, dict[str, list]], str]:
    """Series per name and how they were reduced: "all", "minmax" (exact) or "sampled"."""
    if group not in GROUPS:
        raise BadRequest("group must be 'training' or 'validation'", path="group")
    long = is_long(trial_id, group)
    if not long:
        series, downsampled = metric_series(trial_id, group, names, max_points)
        return series, "minmax" if downsampled else "all"
    if exact:
        return {n: _envelope(trial_id, group, n, max_points) for n in names}, "minmax"
    out: dict[str, dict[str, list]] = {n: {"steps": [], "values": []} for n in names}
    rows = cast(
        "list[tuple[int, dict[str, Any]]]",
        db.session.execute(_SAMPLE_SQL, {"t": trial_id, "g": group, "n": max_points}).all(),
    )
    for steps, metrics in rows:
        for name in names:
            v = metrics.get(name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                continue
            out[name]["steps"].append(int(steps))
            out[name]["values"].append(float(v))
    return out, "sampled"


def _envelope(trial_id: int, group: str, name: str, max_points: int) -> dict[str, list]:
    steps: list[int] = []
    values: list[float] = []
    rows = cast(
        "list[tuple[Any, list[Any], list[Any]]]",
        db.session.execute(
            _ENVELOPE_SQL, {"t": trial_id, "g": group, "name": name, "b": max(1, max_points // 2)}
        ).all(),
    )
    for _k, lo, hi in rows:
        for step, value in sorted({(lo[1], lo[0]), (hi[1], hi[0])}):
            steps.append(int(step))
            values.append(float(value))
    return {"steps": steps, "values": values}


def chart_metric_names(trial_id: int) -> dict[str, list[str]]:
    """The metric names per group; for a long series, those of its first and last rows."""
    if not _postgres():
        return metric_names(trial_id)
    long = {g: is_long(trial_id, g) for g in GROUPS}
    if not any(long.values()):
        return metric_names(trial_id)
    out: dict[str, list[str]] = {}
    rows: ScalarResult[str]
    for group in GROUPS:
        if long[group]:
            rows = db.session.execute(
                _NAMES_SQL, {"t": trial_id, "g": group, "k": NAME_SAMPLE_ROWS}
            ).scalars()
        else:
            rows = db.session.execute(_ALL_NAMES_SQL, {"t": trial_id, "g": group}).scalars()
        out[group] = sorted(set(rows))
    return out
