"""The GC planner's input: an experiment's live checkpoints as `Candidate` tuples, in one query.

One set-based statement on the tables (no ORM objects, no per-checkpoint query): each live
checkpoint LEFT JOINed to the validation at its step, with the searcher metric extracted as a
number by the database (no JSON document decoded in Python), and `protected` computed by two
hashed `IN` subqueries (the trials' resume checkpoints, the model registry's versions). This is
what keeps planning an experiment of 10,000 checkpoints far under a second.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Float, and_, case, cast, func, null, or_, select
from sqlalchemy.sql.elements import ColumnElement

from master.ckpt.policy import Candidate
from master.db import db
from master.models import Checkpoint, Metric, ModelVersion, Trial
from master.states import CheckpointState

LIVE_STATES = (CheckpointState.ACTIVE,)


def _json_number(column: Any, key: str, dialect: str) -> ColumnElement[Any]:
    """`column[key]` as a float when it is a JSON number, else NULL (strings, booleans, null)."""
    if dialect == "postgresql":
        return case(
            (func.jsonb_typeof(column[key]) == "number", column[key].as_float()),
            else_=None,
        )
    # SQLite's JSON1: json_type() names the type at a path; a quoted member name in the path
    # so a metric called "a.b" is one key, not a nested one.
    path = '$."' + key.replace('"', '\\"') + '"'
    return case(
        (
            func.json_type(column, path).in_(("integer", "real")),
            cast(func.json_extract(column, path), Float),
        ),
        else_=None,
    )


def candidates(experiment_id: int, metric_name: str | None) -> list[Candidate]:
    """The experiment's live checkpoints with their validation metric and protection."""
    c, m = Checkpoint.__table__, Metric.__table__
    t, mv = Trial.__table__, ModelVersion.__table__
    dialect = db.engine.dialect.name
    protected = or_(
        c.c.uuid.in_(select(t.c.latest_checkpoint).where(t.c.experiment_id == experiment_id)),
        c.c.uuid.in_(select(mv.c.checkpoint_uuid)),
    )
    if metric_name:
        value: ColumnElement[Any] = _json_number(m.c.metrics, metric_name, dialect)
        source: Any = c.outerjoin(
            m,
            and_(
                m.c.trial_id == c.c.trial_id,
                m.c.group == "validation",
                m.c.steps_completed == c.c.steps_completed,
                # A validation a resumed run superseded does not rank the checkpoint.
                m.c.superseded.is_(False),
            ),
        )
    else:
        value, source = cast(null(), Float), c
    stmt = (
        select(
            c.c.uuid,
            c.c.trial_id,
            c.c.reported_at,
            c.c.steps_completed,
            value,
            protected,
            c.c.size,
        )
        .select_from(source)
        .where(c.c.experiment_id == experiment_id, c.c.state.in_(LIVE_STATES))
    )
    out: dict[str, Candidate] = {}
    rows = typing.cast(
        "Iterable[tuple[str, int, datetime, int, float | None, bool, int | None]]",
        db.session.connection().execute(stmt),
    )
    for uuid, trial_id, at, steps, metric, prot, size in rows:
        if metric is None and uuid in out:
            continue  # two validations at one step: one with a number wins
        # Age order: report time, ties broken by steps (a float: the keep rule sorts by it).
        out[uuid] = Candidate(
            uuid, trial_id, at.timestamp() + steps * 1e-9, metric, bool(prot), int(size or 0)
        )
    return list(out.values())
