"""Metrics ingestion (a hot path: one multi-row INSERT per batch) and reads."""

from __future__ import annotations

import io
import json
import logging
import math
from datetime import datetime
from typing import Any, cast

import orjson
from sqlalchemy import CursorResult, ScalarResult, select, text

from master.ckpt import replan
from master.db import db, iso, utcnow
from master.errors import BadRequest
from master.jsoncheck import INT64_MAX, MAX_JSON_DEPTH, check_json, path_at_depth
from master.models import Metric, MetricBatch, Trial

GROUPS = ("training", "validation")
log = logging.getLogger("detlab.master")


def _encode(metrics: dict) -> str:
    """Compact, strict JSON text. orjson is ~10x the stdlib here (the ingest hot path); its
    output has no NaN because the request was parsed strictly (`parse_reports_body`)."""
    return orjson.dumps(metrics).decode()


def parse_reports_body(raw: bytes) -> tuple[Any, str | None]:
    """Parse a metrics request strictly (no NaN/Infinity tokens), fast: (reports, batch_id)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise _located(raw, e) from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if b"\\u0000" in raw:
        check_json(body)  # the slow walk only when a NUL may be there: it names the field
    batch_id = body.get("batch_id")
    if batch_id is not None and (not isinstance(batch_id, str) or not 0 < len(batch_id) <= 64):
        raise BadRequest("batch_id must be a string of 1 to 64 characters", path="batch_id")
    return body.get("reports"), batch_id


def _located(raw: bytes, err: Exception) -> BadRequest:
    """Why orjson refused a body, with the path of the bad value where there is one: NaN and
    Infinity, lone surrogates and deep nesting are named like every other route names them.
    The slow parse runs only for a body already refused."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_constant=float)  # NaN -> nan: check_json names it
    except RecursionError:
        path = path_at_depth(text)
        return BadRequest(
            f"{path or 'request body'}: nested deeper than {MAX_JSON_DEPTH} levels", path
        )
    except ValueError:  # a syntax error or bad UTF-8: the parser's message has the position
        return BadRequest(f"request body is not valid JSON: {err}")
    try:
        check_json(value)
    except BadRequest as e:
        return e
    return BadRequest(f"request body is not valid JSON: {err}")


def _first_time(trial_id: int, batch_id: str) -> bool:
    """Record the batch id; False when it was stored before (a retry whose reply was lost)."""
    dialect = db.session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
    stmt = insert(MetricBatch.__table__).values(
        trial_id=trial_id, batch_id=batch_id, stored_at=utcnow()
    )
    result = cast(CursorResult[Any], db.session.execute(stmt.on_conflict_do_nothing()))
    return result.rowcount == 1


MAX_REPORTS = 50_000


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def ingest(trial: Trial, reports: Any, batch_id: str | None = None) -> int:
    """Validate a batch, insert it in one statement, and roll the trial's summary forward.

    With a `batch_id`, a batch already stored is acknowledged again without storing it twice.
    """
    if not isinstance(reports, list):
        raise BadRequest("reports must be a list", path="reports")
    if len(reports) > MAX_REPORTS:
        raise BadRequest(f"at most {MAX_REPORTS} reports per request", path="reports")
    now_text = utcnow().isoformat()
    rows: list[dict[str, Any]] = []
    max_steps = trial.steps_completed
    latest_val: tuple[int, dict] | None = None
    for i, r in enumerate(reports):
        row = _row(trial.id, i, r, now_text)
        rows.append(row)
        steps = row["steps_completed"]
        max_steps = max(max_steps, steps)
        if row["group"] == "validation" and (latest_val is None or steps >= latest_val[0]):
            latest_val = (steps, row["metrics"])
    if not rows:
        return 0
    if batch_id is not None and not _first_time(trial.id, batch_id):
        db.session.rollback()
        return len(rows)
    _insert(rows)
    if max_steps != trial.steps_completed:
        trial.steps_completed = max_steps
    if latest_val is not None:
        trial.latest_validation = {"steps_completed": latest_val[0], **latest_val[1]}
    db.session.commit()
    if latest_val is not None:
        replan.changed(trial.experiment_id)  # it may rank a checkpoint that arrived first
    if latest_val is not None and trial.searcher_completed == 0:
        _best_from_validations(trial, rows)
    if latest_val is not None and trial.experiment.conf.searcher.time_metric:
        # After the commit: taking the state lock while holding the trial's row lock could
        # deadlock with a transition that holds the lock and waits for the row.
        _to_searcher(trial, rows)
    return len(rows)


def _row(trial_id: int, i: int, r: Any, now_text: str) -> dict[str, Any]:
    """One report checked (a 400 naming `reports[i]` when it is wrong) as a row to insert."""
    if not isinstance(r, dict):
        raise BadRequest("each report must be an object", path=f"reports[{i}]")
    group = r.get("group")
    if group not in GROUPS:
        raise BadRequest(
            f"group must be 'training' or 'validation', got {group!r}",
            path=f"reports[{i}].group",
        )
    steps = r.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= INT64_MAX:
        raise BadRequest(
            "steps_completed must be an integer >= 0", path=f"reports[{i}].steps_completed"
        )
    metrics = r.get("metrics")
    if not isinstance(metrics, dict):
        raise BadRequest("metrics must be an object", path=f"reports[{i}].metrics")
    try:
        # Strict JSON: NaN/Infinity must travel as strings ("NaN"), PostgreSQL rejects them.
        encoded = _encode(metrics)
        if encoded.count("{") + encoded.count("[") > MAX_JSON_DEPTH:  # cheap; walk only then
            check_json(metrics, path=f"reports[{i}].metrics")
    except (ValueError, TypeError):
        check_json(metrics, path=f"reports[{i}].metrics")  # deep nesting: named with its path
        raise BadRequest(
            'metric values must be JSON with finite numbers; send NaN/Infinity as "NaN"/"Infinity"',
            path=f"reports[{i}].metrics",
        ) from None
    ts: datetime | str = now_text
    if isinstance(r.get("reported_at"), str):
        try:
            # Re-written, never passed on: Python accepts any separator (a tab too), and the
            # text goes into COPY's tab-separated stream.
            ts = datetime.fromisoformat(r["reported_at"]).isoformat()
        except ValueError:
            raise BadRequest(
                "reported_at must be ISO 8601", path=f"reports[{i}].reported_at"
            ) from None
    return {
        "trial_id": trial_id,
        "group": group,
        "steps_completed": steps,
        "metrics": metrics,
        "reported_at": ts,
        "_json": encoded,
    }


def _best_from_validations(trial: Trial, rows: list[dict[str, Any]]) -> None:
    """Determined 0.38: while a script reports no operation completion, the searcher metric of
    its validations is the trial's (and the experiment's) best validation."""
    from master.context import state_lock
    from master.services.trial.trials import record_searcher_metric

    name = trial.experiment.conf.searcher.metric
    values = [
        v
        for r in rows
        if r["group"] == "validation" and (v := _number(r["metrics"].get(name))) is not None
    ]
    if not values:
        return
    with state_lock():
        db.session.refresh(trial)
        db.session.refresh(trial.experiment)
        for v in values:
            record_searcher_metric(trial.experiment, trial, v)
        db.session.commit()


def _to_searcher(trial: Trial, rows: list[dict[str, Any]]) -> None:
    """Validation reports drive the time_metric form of adaptive ASHA (it may stop the trial)."""
    from master.context import state_lock
    from master.services.experiment.searcher import searcher_validation_metrics

    reports = [
        {"metrics": r["metrics"], "steps": r["steps_completed"]}
        for r in rows
        if r["group"] == "validation"
    ]
    with state_lock():
        searcher_validation_metrics(trial.experiment, trial, reports)
        # Before the lock is let go: the searcher's writes hold their rows until the commit,
        # and a writer that takes the lock next may need them in another order.
        db.session.commit()


_COPY_SQL = 'COPY metrics (trial_id, "group", steps_completed, metrics, reported_at) FROM STDIN'


def _insert(rows: list[dict[str, Any]]) -> None:
    """One statement per batch: COPY on PostgreSQL (about 4x a multi-row INSERT), else INSERT."""
    if db.session.get_bind().dialect.name == "postgresql":
        # COPY's text format: tab-separated, backslashes doubled. The JSON text has no raw tabs
        # or newlines (json.dumps escapes them), and group/timestamp are validated above.
        buf = io.StringIO(
            "".join(
                f"{r['trial_id']}\t{r['group']}\t{r['steps_completed']}\t"
                f"{r['_json'].replace(chr(92), chr(92) * 2)}\t{r['reported_at']}\n"
                for r in rows
            )
        )
        import psycopg2

        cursor = db.session.connection().connection.cursor()
        try:
            cursor.copy_expert(_COPY_SQL, buf)
        except psycopg2.DataError as e:
            db.session.rollback()
            # The database's own words name its internals (COPY, columns): they go to the log.
            log.warning("metrics COPY refused: %s", (e.pgerror or str(e)).strip())
            raise BadRequest(
                "the database could not store a report (a value out of its range)", "reports"
            ) from None
        finally:
            cursor.close()
    else:
        for r in rows:
            del r["_json"]
            r["reported_at"] = datetime.fromisoformat(r["reported_at"])
        db.session.execute(Metric.__table__.insert(), rows)


def read_metrics(
    trial_id: int,
    group: str | None,
    after_steps: int | None,
    limit: int,
    include_superseded: bool = False,
) -> list:
    """Reports in step order; superseded ones (re-done after a restore) only for audits."""
    q = select(Metric).where(Metric.trial_id == trial_id)
    if not include_superseded:
        q = q.where(Metric.superseded.is_(False))
    if group:
        if group not in GROUPS:
            raise BadRequest("group must be 'training' or 'validation'", path="group")
        q = q.where(Metric.group == group)
    if after_steps is not None:
        q = q.where(Metric.steps_completed > after_steps)
    q = q.order_by(Metric.steps_completed, Metric.id).limit(limit)
    rows = []
    for m in db.session.execute(q).scalars():
        row = {
            "group": m.group,
            "steps_completed": m.steps_completed,
            "metrics": m.metrics,
            "reported_at": iso(m.reported_at),
        }
        if include_superseded:
            row["superseded"] = m.superseded
        rows.append(row)
    return rows


def metric_names(trial_id: int) -> dict[str, list[str]]:
    """The metric names a trial reported, per group."""
    out: dict[str, list[str]] = {}
    bind = db.session.get_bind()
    for group in GROUPS:
        if bind.dialect.name == "postgresql":
            rows: ScalarResult[str] = db.session.execute(
                text(
                    "SELECT DISTINCT jsonb_object_keys(metrics) FROM metrics "
                    'WHERE trial_id = :t AND "group" = :g AND NOT superseded'
                ),
                {"t": trial_id, "g": group},
            ).scalars()
            names: set[str] = set(rows)
        else:
            names = set()
            m: dict[str, Any]
            for m in db.session.execute(
                select(Metric.metrics).where(
                    Metric.trial_id == trial_id,
                    Metric.group == group,
                    Metric.superseded.is_(False),
                )
            ).scalars():
                names.update(m)
        out[group] = sorted(names)
    return out


def metric_series(
    trial_id: int, group: str, names: list[str], max_points: int
) -> tuple[dict[str, dict[str, list]], bool]:
    """Numeric series per metric name, downsampled to about `max_points` points.

    Downsampling keeps each bucket's min and max (in step order), so spikes survive; the client
    never has to load every point of a long run.
    """
    if group not in GROUPS:
        raise BadRequest("group must be 'training' or 'validation'", path="group")
    series: dict[str, tuple[list[int], list[float]]] = {n: ([], []) for n in names}
    q = (
        select(Metric.steps_completed, Metric.metrics)
        .where(Metric.trial_id == trial_id, Metric.group == group, Metric.superseded.is_(False))
        .order_by(Metric.steps_completed, Metric.id)
    )
    rows = cast("list[tuple[int, dict[str, Any]]]", db.session.execute(q).all())
    for step, metrics in rows:
        for name in names:
            v = metrics.get(name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                continue
            s = series[name]
            s[0].append(step)
            s[1].append(float(v))
    out: dict[str, dict[str, list]] = {}
    downsampled = False
    for name, (steps, values) in series.items():
        if len(steps) > max_points:
            steps, values = _minmax_downsample(steps, values, max_points)
            downsampled = True
        out[name] = {"steps": steps, "values": values}
    return out, downsampled


def _minmax_downsample(
    steps: list[int], values: list[float], max_points: int
) -> tuple[list[int], list[float]]:
    buckets = max(1, max_points // 2)
    size = len(steps) / buckets
    out_s: list[int] = []
    out_v: list[float] = []
    for b in range(buckets):
        lo, hi = int(b * size), int((b + 1) * size)
        if lo >= hi:
            continue
        chunk = values[lo:hi]
        i_min = lo + min(range(len(chunk)), key=chunk.__getitem__)
        i_max = lo + max(range(len(chunk)), key=chunk.__getitem__)
        for i in sorted({i_min, i_max}):
            out_s.append(steps[i])
            out_v.append(values[i])
    return out_s, out_v
