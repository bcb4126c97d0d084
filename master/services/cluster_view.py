"""The cluster at a glance for people: agents with their slots (and who holds them)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from master.db import db
from master.models import Agent
from master.services import heartbeats
from master.services.agents import agent_json

# A slot held by a trial whose device is this idle looks wasted (shown flagged).
IDLE_UTIL_PERCENT = 5.0


def agents_overview() -> list[dict]:
    """Every agent as `GET /api/v1/agents` shows it, with the latest heartbeat stats."""
    heartbeats.flush()
    agents = db.session.execute(
        select(Agent).options(selectinload(Agent.slots)).order_by(Agent.id)
    ).scalars()
    return [agent_json(a) for a in agents]


def idle_but_allocated(slot: dict) -> bool:
    stats = slot.get("stats") or {}
    util = stats.get("util_percent")
    return (
        bool(slot.get("allocation_id"))
        and isinstance(util, int | float)
        and (util < IDLE_UTIL_PERCENT)
    )
