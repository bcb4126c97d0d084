"""The agents listing for people: `GET /api/v1/agents` and the web cluster page read this.

One rule (what an agent and its slots look like, which trial holds each slot) and a fixed
number of statements whatever the cluster's size: the agents, their slots (one selectin), and
one lookup of the trials behind every held slot (not one per agent).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from master.db import db, iso
from master.models import Agent, Allocation
from master.services import heartbeats


def agent_json(agent: Agent, trial_of: dict[str, int]) -> dict:
    """`agent` and its slots; `trial_of` maps allocation ids to the trial that holds them."""
    stats = agent.slot_stats or {}
    return {
        "id": agent.id,
        "state": agent.state.value,
        "resource_pool": agent.resource_pool,
        "hostname": agent.hostname,
        "runtime": agent.runtime,
        "version": agent.version,
        "registered_at": iso(agent.registered_at),
        "last_seen": iso(agent.last_seen),
        "slots": [
            {
                "index": s.index,
                "type": s.type,
                "uuid": s.uuid,
                "name": s.name,
                "memory_mb": s.memory_mb,
                "enabled": s.enabled,
                "allocation_id": s.allocation_id,
                "trial_id": trial_of.get(s.allocation_id) if s.allocation_id else None,
                "stats": stats.get(str(s.index), s.stats),
            }
            for s in agent.slots
        ],
    }


def list_agents() -> list[dict]:
    """Every agent (by id) with its slots and the latest heartbeat stats."""
    heartbeats.flush()  # show the latest stats and last_seen
    agents = list(
        db.session.execute(select(Agent).options(selectinload(Agent.slots)).order_by(Agent.id))
        .scalars()
        .all()
    )
    held = [s.allocation_id for a in agents for s in a.slots if s.allocation_id]
    trial_of: dict[str, int] = {}
    if held:
        rows = db.session.execute(
            select(Allocation.id, Allocation.trial_id).where(Allocation.id.in_(held))
        )
        trial_of = {aid: tid for aid, tid in rows}
    return [agent_json(a, trial_of) for a in agents]
