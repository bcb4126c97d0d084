"""Trial logs: ingest batches from agents, add the master's own lines, read and follow them.

Inserts are serialised by one lock so sequence numbers (the row ids) become visible in order:
a follower reading `?after=N` never skips a line that commits late.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from detlab.text import clean_text
from master.context import master_state
from master.db import db, iso, utcnow
from master.errors import BadRequest, NotFound
from master.models import Allocation, TaskLog, Trial
from master.notify import hub, logs_key
from master.states import is_terminal

MAX_LINE = 64 * 1024
logger = logging.getLogger(__name__)


def _trial_for_allocation(alloc_id: str, agent_id: str | None = None) -> int | None:
    """The allocation's trial; None if unknown, or if `agent_id` runs no container of it.

    An agent may only write lines of allocations it runs or ran: the cluster's agent token must
    not be a way to forge lines in any trial's log.
    """
    if "\x00" in alloc_id:  # no allocation id holds NUL (and PostgreSQL refuses the parameter)
        return None
    cache = master_state().allocation_trial
    hit = cache.get(alloc_id)
    if hit is None or (agent_id is not None and agent_id not in hit[1]):
        from master.services.allocations import containers_of  # it imports this module

        alloc = db.session.get(Allocation, alloc_id)  # also re-read: a container may be new
        if alloc is None:
            return None
        agents = frozenset(a for a in (*containers_of(alloc), alloc.agent_id) if a)
        hit = (alloc.trial_id, agents)
        if len(cache) > 100_000:
            cache.clear()
        cache[alloc_id] = hit
    if agent_id is not None and agent_id not in hit[1]:
        logger.warning(
            "agent %s sent log lines for allocation %s it does not run", agent_id, alloc_id
        )
        return None
    return hit[0]


def _parse_ts(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return utcnow()


def ingest_agent_logs(agent_id: str, entries: Any) -> int:
    if not isinstance(entries, list):
        raise BadRequest("logs must be a list", path="logs")
    rows = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("line"), str):
            # One malformed entry costs only itself: a 400 would drop (or, from an older
            # agent, re-send forever) every good line of the batch with it.
            logger.warning("agent %s: log entry %d has no string 'line'; dropped", agent_id, i)
            continue
        tid = _trial_for_allocation(str(e.get("allocation_id")), agent_id)
        if tid is None:
            continue  # an allocation the master never knew, or another agent's: drop its lines
        stream = e.get("stream") if e.get("stream") in ("stdout", "stderr") else "stdout"
        rows.append(
            {
                "trial_id": tid,
                "allocation_id": e.get("allocation_id"),
                "agent_id": agent_id,
                "timestamp": _parse_ts(e.get("timestamp")),
                "stream": stream,
                # A NUL (PostgreSQL refuses it in text) is replaced in that line alone: one bad
                # line never costs the batch, so never the agent's other trials' lines.
                "line": e["line"][:MAX_LINE].replace("\x00", "\ufffd"),
            }
        )
    _insert(rows)
    return len(rows)


TAIL_MAX = 5_000  # a re-attaching agent re-reads at most one shipper batch (1,000 lines) twice


def agent_log_tail(agent_id: str, alloc_id: str, limit: int) -> list[dict]:
    """The newest `limit` trial-output lines an agent shipped for an allocation, oldest first.

    A re-attaching agent compares them with the container log it re-reads: lines the master
    stored just before the agent died (their delivery not yet recorded) are not stored twice.
    """
    tid = _trial_for_allocation(alloc_id)  # lines of another agent's: none match below
    if tid is None:
        raise NotFound(f"allocation {alloc_id!r} not found")
    rows = db.session.execute(
        select(TaskLog.stream, TaskLog.timestamp, TaskLog.line)
        .where(
            TaskLog.trial_id == tid,
            TaskLog.allocation_id == alloc_id,
            TaskLog.agent_id == agent_id,
            TaskLog.stream.in_(("stdout", "stderr")),
        )
        .order_by(TaskLog.id.desc())
        .limit(limit)
    ).all()
    return [{"stream": s, "timestamp": iso(ts), "line": line} for s, ts, line in reversed(rows)]


def write_master_line(trial_id: int, alloc: Allocation | None, line: str) -> None:
    """A line from the master itself (restarts, failures), in the trial's log. No commit here."""
    _insert(
        [
            {
                "trial_id": trial_id,
                "allocation_id": alloc.id if alloc else None,
                "agent_id": alloc.agent_id if alloc else None,
                "timestamp": utcnow(),
                "stream": "master",
                "line": clean_text(f"[master] {line}"),  # it may quote trial output
            }
        ],
        commit=False,
    )


def _insert(rows: list[dict], commit: bool = True) -> None:
    if not rows:
        return
    if commit:
        with master_state().log_write_lock:
            db.session.execute(TaskLog.__table__.insert(), rows)
            db.session.commit()
    else:
        # Inside a state transition: the caller commits; the lock still orders it with ingest.
        db.session.execute(TaskLog.__table__.insert(), rows)
    hub().notify(*{logs_key(r["trial_id"]) for r in rows})


def read_logs(trial_id: int, after: int, limit: int) -> list[dict]:
    rows = db.session.execute(
        select(TaskLog)
        .where(TaskLog.trial_id == trial_id, TaskLog.id > after)
        .order_by(TaskLog.id)
        .limit(limit)
    ).scalars()
    return [
        {
            "seq": r.id,
            "timestamp": iso(r.timestamp),
            "stream": r.stream,
            "agent_id": r.agent_id,
            "allocation_id": r.allocation_id,
            "line": r.line,
        }
        for r in rows
    ]


LOG_GRACE_S = 3.0  # agents ship the last lines a moment after they report the exit


def _ended_for(trial: Trial | None) -> float | None:
    """Seconds since the trial ended, None while it runs."""
    if trial is None or not is_terminal(trial.state):
        return None
    if trial.ended_at is None:
        return LOG_GRACE_S
    ended = trial.ended_at if trial.ended_at.tzinfo else trial.ended_at.replace(tzinfo=UTC)
    return (utcnow() - ended).total_seconds()


def logs_page(trial_id: int, after: int, limit: int, follow: bool, timeout: float) -> dict:
    seen = hub().version(logs_key(trial_id))
    logs = read_logs(trial_id, after, limit)
    ended_for = _ended_for(db.session.get(Trial, trial_id))
    if not logs and follow:
        wait = timeout if ended_for is None else max(0.0, min(timeout, LOG_GRACE_S - ended_for))
        if wait > 0:
            db.session.commit()  # end the read transaction before waiting
            hub().wait(logs_key(trial_id), seen, wait)
            logs = read_logs(trial_id, after, limit)
            db.session.expire_all()
            ended_for = _ended_for(db.session.get(Trial, trial_id))
    last = logs[-1]["seq"] if logs else after
    done = not logs and ended_for is not None and ended_for >= LOG_GRACE_S
    return {"logs": logs, "last_seq": last, "done": done}
