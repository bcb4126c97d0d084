"""Agent heartbeats, buffered: a poll with nothing to report writes nothing to the database.

The buffer (agent id -> last seen, slot stats) is flushed in one batched UPDATE every second and
before the reaper decides who is lost. A master crash loses at most a second of heartbeats,
which only delays nothing: agents poll again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import bindparam

from master.context import master_state
from master.db import db
from master.models import Agent
from master.states import AgentState


def beat(agent_id: str, when: datetime, stats: dict[str, Any]) -> None:
    ms = master_state()
    with ms.agents.heartbeat_lock:
        ms.agents.heartbeats[agent_id] = (when, stats)


def flush() -> int:
    """Write the buffered heartbeats (only for agents still ACTIVE). Caller has an app context."""
    ms = master_state()
    with ms.agents.heartbeat_lock:
        pending = ms.agents.heartbeats
        if not pending:
            return 0
        items = list(pending.items())
        pending.clear()
    if db.session.get_bind().dialect.name == "postgresql":
        _flush_postgres(items)
    else:
        stmt = (
            Agent.__table__.update()
            .where(Agent.id == bindparam("agent_id"), Agent.state == AgentState.ACTIVE)
            .values(last_seen=bindparam("seen"), slot_stats=bindparam("stats"))
        )
        db.session.execute(
            stmt, [{"agent_id": a, "seen": seen, "stats": stats} for a, (seen, stats) in items]
        )
    db.session.commit()
    return len(items)


def _flush_postgres(items: list[tuple[str, tuple[datetime, dict[str, Any]]]]) -> None:
    """One statement for every heartbeat (a loop of UPDATEs costs a round trip each)."""
    from psycopg2.extras import execute_values

    cursor = db.session.connection().connection.cursor()
    try:
        execute_values(
            cursor,
            "UPDATE agents SET last_seen = v.seen, slot_stats = v.stats::jsonb "
            "FROM (VALUES %s) AS v(id, seen, stats) "
            "WHERE agents.id = v.id AND agents.state = 'ACTIVE'",
            [(a, seen, orjson.dumps(stats).decode()) for a, (seen, stats) in items],
            template="(%s, %s::timestamptz, %s)",
            page_size=1000,
        )
    finally:
        cursor.close()


def forget(agent_id: str) -> None:
    ms = master_state()
    with ms.agents.heartbeat_lock:
        ms.agents.heartbeats.pop(agent_id, None)
