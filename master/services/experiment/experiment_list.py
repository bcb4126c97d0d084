"""Experiments for people: filtered, sorted, paginated listing (web pages; REST API's filters).

One query builder, so a filter means the same everywhere: states, owner, a name substring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import defer, selectinload

from master.db import db
from master.errors import BadRequest
from master.models import Allocation, Experiment, Trial, User
from master.states import LIVE_ALLOCATION, State

# Sort keys a listing accepts, and the column each one orders by.
SORT_KEYS = ("id", "name", "owner", "state", "progress", "best", "started", "ended")


@dataclass(frozen=True)
class ExperimentQuery:
    states: tuple[str, ...] = ()
    owner: str | None = None
    name: str | None = None  # case-insensitive substring of the name
    archived: bool | None = None  # None: archived or not
    sort: str = "id"
    descending: bool = True
    limit: int = 50
    offset: int = 0


@dataclass
class ExperimentPage:
    experiments: list[Experiment]
    total: int
    trial_counts: dict[int, int] = field(default_factory=dict)


def check_states(states: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Upper-case the names and refuse unknown ones (400 naming the first bad one)."""
    out = tuple(s.strip().upper() for s in states if s.strip())
    bad = [s for s in out if s not in State.__members__]
    if bad:
        raise BadRequest(
            f"unknown state {bad[0]!r}; expected one of {', '.join(State.__members__)}",
            path="state",
        )
    return out


def _filtered(stmt: Select, q: ExperimentQuery) -> Select:
    if q.states:
        stmt = stmt.where(Experiment.state.in_(check_states(q.states)))
    if q.owner:
        stmt = stmt.where(Experiment.owner_id.in_(select(User.id).where(User.username == q.owner)))
    if q.archived is not None:
        stmt = stmt.where(Experiment.archived.is_(q.archived))
    if q.name:
        escaped = q.name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        stmt = stmt.where(Experiment.name.ilike(f"%{escaped}%", escape="\\"))
    return stmt


def _order(q: ExperimentQuery) -> list[Any]:
    if q.sort not in SORT_KEYS:
        raise BadRequest(
            f"unknown sort key {q.sort!r}; expected one of {', '.join(SORT_KEYS)}", path="sort"
        )
    column = {
        "id": Experiment.id,
        "name": func.lower(Experiment.name),
        "owner": User.username,
        "state": Experiment.state,
        "progress": Experiment.progress,
        "best": Experiment.best_validation,
        "started": Experiment.created_at,
        "ended": Experiment.ended_at,
    }[q.sort]
    primary = column.desc() if q.descending else column.asc()
    if q.sort in ("best", "ended"):  # nullable: experiments without one go last either way
        primary = primary.nulls_last()
    if q.sort == "id":  # matches the primary key's index (a backward scan, no sort)
        return [primary]
    tie = Experiment.id.desc() if q.descending else Experiment.id.asc()
    return [primary, tie]


def list_experiments(q: ExperimentQuery) -> ExperimentPage:
    """One page of experiments (owners loaded), the total that match, and their trial counts."""
    # The model definition, the submitted YAML and the searcher's state can be large: a list
    # never shows them (they load on access).
    stmt = _filtered(select(Experiment), q).options(
        selectinload(Experiment.owner),
        defer(Experiment.original_config),
        defer(Experiment.searcher_state),
    )
    if q.sort == "owner":
        stmt = stmt.join(User, Experiment.owner_id == User.id)
    rows: list[Experiment] = list(
        db.session.execute(stmt.order_by(*_order(q)).limit(q.limit).offset(q.offset)).scalars()
    )
    total: int = db.session.execute(_filtered(select(func.count(Experiment.id)), q)).scalar_one()
    return ExperimentPage(rows, int(total), trial_counts([e.id for e in rows]))


def trial_counts(exp_ids: list[int]) -> dict[int, int]:
    if not exp_ids:
        return {}
    rows = db.session.execute(
        select(Trial.experiment_id, func.count(Trial.id))
        .where(Trial.experiment_id.in_(exp_ids))
        .group_by(Trial.experiment_id)
    ).all()
    counts = {eid: 0 for eid in exp_ids}
    counts.update({eid: int(n) for eid, n in rows})
    return counts


def live_allocation_states(trial_ids: list[int]) -> dict[int, tuple[str, str | None]]:
    """trial id -> (allocation state, agent id) of its live allocation, in one query."""
    if not trial_ids:
        return {}
    rows = db.session.execute(
        select(Allocation.trial_id, Allocation.state, Allocation.agent_id).where(
            Allocation.trial_id.in_(trial_ids), Allocation.state.in_(LIVE_ALLOCATION)
        )
    ).all()
    return {tid: (state, agent) for tid, state, agent in rows if tid is not None}
