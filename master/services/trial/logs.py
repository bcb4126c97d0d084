"""Trial logs: ingest batches from agents, add the master's own lines, read and follow them.

Inserts are serialised by one lock so sequence numbers (the row ids) become visible in order:
a follower reading `?after=N` never skips a line that commits late.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import ColumnElement, func, select

from detlab.text import clean_text
from master.context import master_state
from master.db import db, iso, utcnow
from master.errors import BadRequest, NotFound
from master.log_tail import TrialTail
from master.models import Allocation, TaskLog, Trial
from master.notify import hub, logs_key, notify_after_commit, task_logs_key, trial_key
from master.states import is_terminal

MAX_LINE = 64 * 1024
logger = logging.getLogger(__name__)


def _owner_of(alloc_id: str, agent_id: str | None = None) -> tuple[int | None, str] | None:
    """The allocation's (trial id or None, task id); None if unknown, or if `agent_id` runs no
    container of it.

    An agent may only write lines of allocations it runs or ran: the cluster's agent token must
    not be a way to forge lines in any task's log.
    """
    if "\x00" in alloc_id:  # no allocation id holds NUL (and PostgreSQL refuses the parameter)
        return None
    cache = master_state().logs.allocation_owner
    hit = cache.get(alloc_id)
    if hit is None or (agent_id is not None and agent_id not in hit[2]):
        from master.services.task.allocations import containers_of  # it imports this module

        alloc = db.session.get(Allocation, alloc_id)  # also re-read: a container may be new
        if alloc is None:
            return None
        agents = frozenset(a for a in (*containers_of(alloc), alloc.agent_id) if a)
        hit = (alloc.trial_id, alloc.task_id, agents)
        if len(cache) > 100_000:
            cache.clear()
        cache[alloc_id] = hit
    if agent_id is not None and agent_id not in hit[2]:
        logger.warning(
            "agent %s sent log lines for allocation %s it does not run", agent_id, alloc_id
        )
        return None
    return hit[0], hit[1]


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
        owner = _owner_of(str(e.get("allocation_id")), agent_id)
        if owner is None:
            continue  # an allocation the master never knew, or another agent's: drop its lines
        stream = e.get("stream") if e.get("stream") in ("stdout", "stderr") else "stdout"
        rows.append(
            {
                **_owner_columns(*owner),
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
    owner = _owner_of(alloc_id)  # lines of another agent's: none match below
    if owner is None:
        raise NotFound(f"allocation {alloc_id!r} not found")
    tid, task_id = owner
    rows = db.session.execute(
        select(TaskLog.stream, TaskLog.timestamp, TaskLog.line)
        .where(
            TaskLog.trial_id == tid if tid is not None else TaskLog.task_id == task_id,
            TaskLog.allocation_id == alloc_id,
            TaskLog.agent_id == agent_id,
            TaskLog.stream.in_(("stdout", "stderr")),
        )
        .order_by(TaskLog.id.desc())
        .limit(limit)
    ).all()
    return [{"stream": s, "timestamp": iso(ts), "line": line} for s, ts, line in reversed(rows)]


def _owner_columns(trial_id: int | None, task_id: str) -> dict[str, Any]:
    """A trial's lines are keyed by its trial (as before tasks); any other task's by the task."""
    if trial_id is not None:
        return {"trial_id": trial_id, "task_id": None}
    return {"trial_id": None, "task_id": task_id}


def write_master_line(trial_id: int | None, alloc: Allocation | None, line: str) -> None:
    """A line from the master itself (restarts, failures), in the trial's log. No commit here."""
    assert trial_id is not None, "a trial's line; other tasks' go through write_task_line"
    _insert(
        [
            {
                "trial_id": trial_id,
                "task_id": None,
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
        with master_state().logs.write_lock:
            db.session.execute(TaskLog.__table__.insert(), rows)
            db.session.commit()
    else:
        # Inside a state transition: the caller commits; the lock still orders it with ingest.
        db.session.execute(TaskLog.__table__.insert(), rows)
        notify_after_commit(*{_log_key(r) for r in rows})  # a follower woken now reads nothing
        return
    hub().notify(*{_log_key(r) for r in rows})


def write_line(alloc: Allocation, line: str) -> None:
    """A line from the master in the log of the allocation's task (a trial's or another's)."""
    if alloc.trial_id is not None:
        write_master_line(alloc.trial_id, alloc, line)
    else:
        write_task_line(alloc.task_id, alloc, line)


def write_task_line(task_id: str, alloc: Allocation | None, line: str) -> None:
    """A line from the master in a (non-trial) task's log. No commit here."""
    _insert(
        [
            {
                "trial_id": None,
                "task_id": task_id,
                "allocation_id": alloc.id if alloc else None,
                "agent_id": alloc.agent_id if alloc else None,
                "timestamp": utcnow(),
                "stream": "master",
                "line": clean_text(f"[master] {line}"),
            }
        ],
        commit=False,
    )


def _log_key(row: dict) -> str:
    return (
        logs_key(row["trial_id"]) if row["trial_id"] is not None else task_logs_key(row["task_id"])
    )


def log_line_json(r: Any) -> dict:
    return {
        "seq": r.id,
        "timestamp": iso(r.timestamp),
        "stream": r.stream,
        "agent_id": r.agent_id,
        "allocation_id": r.allocation_id,
        "line": r.line,
    }


def read_lines(owner: ColumnElement[bool], after: int, limit: int) -> list[dict]:
    """One log's lines after `after`, oldest first: `owner` picks the log (a trial's or a
    task's), answered from its (owner, id) index."""
    t = TaskLog.__table__
    rows = db.session.execute(
        select(t.c.id, t.c.timestamp, t.c.stream, t.c.agent_id, t.c.allocation_id, t.c.line)
        .where(owner, t.c.id > after)
        .order_by(t.c.id)
        .limit(limit)
    )
    return [log_line_json(r) for r in rows]


def read_logs(trial_id: int, after: int, limit: int) -> list[dict]:
    """A trial's lines after `after` from the database."""
    return read_lines(TaskLog.__table__.c.trial_id == trial_id, after, limit)


LOG_GRACE_S = 3.0  # agents ship the last lines a moment after they report the exit
# A tail re-reads the database at least this often while followed, even without a wake-up: a
# master line written inside a transition notifies before its transaction commits.
REFRESH_S = 1.0
REFRESH_BATCHES = 5
STATE_REFRESH_S = 2.0  # the trial's state, for "ended" (not every state change notifies)


def _ended_for(state: str | None, ended_at: datetime | None) -> float | None:
    """Seconds since the trial ended, None while it runs."""
    if state is None or not is_terminal(state):
        return None
    if ended_at is None:
        return LOG_GRACE_S
    ended = ended_at if ended_at.tzinfo else ended_at.replace(tzinfo=UTC)
    return (utcnow() - ended).total_seconds()


def fresh_tail(trial_id: int) -> TrialTail:
    """The trial's shared tail, brought up to date when the log (or time) moved since its last
    read: the first follower to arrive reads for all (one query for the lines, one for the
    state when it is due). NotFound when the trial does not exist."""
    tail = master_state().logs.tails.get(trial_id)
    with tail.lock:
        now = time.monotonic()
        # Versions first, then the reads: a line inserted meanwhile moves the version again.
        log_version = hub().version(logs_key(trial_id))
        trial_version = hub().version(trial_key(trial_id))
        if (
            not tail.loaded
            or trial_version != tail.trial_version
            or (now - tail.state_at >= STATE_REFRESH_S)
        ):
            newest = (
                select(func.max(TaskLog.id)).where(TaskLog.trial_id == trial_id).scalar_subquery()
            )
            row = db.session.execute(
                select(Trial.state, Trial.ended_at, newest).where(Trial.id == trial_id)
            ).first()
            tail.exists = row is not None
            if row is not None:
                tail.state, tail.ended_at = str(row[0]), row[1]
                if not tail.loaded:
                    tail.start_at(int(row[2] or 0))
                    tail.log_version, tail.refreshed_at = log_version, now
            tail.trial_version, tail.state_at = trial_version, now
        if not tail.exists:
            raise NotFound(f"trial {trial_id} not found")
        if log_version != tail.log_version or now - tail.refreshed_at >= REFRESH_S:
            for _ in range(REFRESH_BATCHES):  # a burst: more than one batch of new lines
                rows = read_logs(trial_id, tail.last_seq, tail.capacity)
                tail.add(rows)
                if len(rows) < tail.capacity:
                    break
            tail.log_version, tail.refreshed_at = log_version, now
        return tail


def _lines_after(tail: TrialTail, trial_id: int, after: int, limit: int) -> list[dict]:
    with tail.lock:
        logs = tail.after(after, limit)
    # Further behind than the tail reaches (a first page, a slow follower): from the database.
    return read_logs(trial_id, after, limit) if logs is None else logs


class LogSource(Protocol):
    """One log as the pager sees it: a trial's (its shared tail) or another task's."""

    def read(self) -> list[dict]:
        """The lines after the page's `after`, up to its limit (fresh from the log)."""
        ...

    def ended_for(self) -> float | None:
        """Seconds since its task ended, None while it runs (as of the last read)."""
        ...

    def wait(self, seconds: float) -> None:
        """Until a line may have arrived since the last read, at most `seconds`."""
        ...


def follow_page(source: LogSource, after: int, follow: bool, timeout: float) -> dict:
    """Lines after `after`; with `follow`, wait (long poll) until some arrive, the task has ended
    (plus the grace in which agents ship its last lines), or `timeout`. The one pager behind
    every log route, trials' and other tasks' alike."""
    logs = source.read()
    ended_for = source.ended_for()
    if not logs and follow:
        wait = timeout if ended_for is None else max(0.0, min(timeout, LOG_GRACE_S - ended_for))
        deadline = time.monotonic() + wait
        db.session.commit()  # end the read transaction before waiting
        while not logs and (left := deadline - time.monotonic()) > 0:
            source.wait(min(left, REFRESH_S))
            logs = source.read()
            db.session.commit()
        ended_for = source.ended_for()
    last = logs[-1]["seq"] if logs else after
    done = not logs and ended_for is not None and ended_for >= LOG_GRACE_S
    return {"logs": logs, "last_seq": last, "done": done}


class _TrialLog:
    """A trial's log through its shared tail (NotFound on the first read if no such trial)."""

    def __init__(self, trial_id: int, after: int, limit: int) -> None:
        self.trial_id, self.after, self.limit = trial_id, after, limit
        self.tail: TrialTail | None = None

    def read(self) -> list[dict]:
        self.tail = fresh_tail(self.trial_id)
        return _lines_after(self.tail, self.trial_id, self.after, self.limit)

    def ended_for(self) -> float | None:
        assert self.tail is not None
        return _ended_for(self.tail.state, self.tail.ended_at)

    def wait(self, seconds: float) -> None:
        assert self.tail is not None
        hub().wait(logs_key(self.trial_id), self.tail.log_version, seconds)


def logs_page(trial_id: int, after: int, limit: int, follow: bool, timeout: float) -> dict:
    """A trial's lines after `after`; with `follow`, wait (long poll) until some arrive."""
    return follow_page(_TrialLog(trial_id, after, limit), after, follow, timeout)
