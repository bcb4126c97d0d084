"""The agents listing for people: `GET /api/v1/agents` and the web cluster page read this.

One rule (what an agent and its slots look like, which trial holds each slot) and a fixed
number of statements whatever the cluster's size: the agents, their slots (one selectin), and
one lookup of the trials behind every held slot (not one per agent).
"""

from __future__ import annotations

from datetime import timedelta

from flask import current_app
from sqlalchemy import or_, select
from sqlalchemy.orm import selectinload

from master.db import db, iso, utcnow
from master.models import Agent, Allocation
from master.services.agent import heartbeats
from master.states import AgentState


def agent_json(agent: Agent, trial_of: dict[str, int | None]) -> dict:
    """`agent` and its slots; `trial_of` maps allocation ids to the trial that holds them."""
    stats = agent.slot_stats or {}
    return {
        "id": agent.id,
        "state": agent.state.value,
        "resource_pool": agent.resource_pool,
        "hostname": agent.hostname,
        "runtime": agent.runtime,
        "version": agent.version,
        # Whose tasks it runs (its polls say): "isolated", "own_user" (only tasks of users
        # linked to `unix_uid`, its own), "shared" (--shared-unisolated), or null (not said).
        "isolation": agent.isolation,
        "unix_uid": agent.unix_uid,
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


def list_agents(all_agents: bool = False) -> list[dict]:
    """The agents (by id) with their slots and the latest heartbeat stats: every one with
    `all_agents`, else without the LOST ones last seen longer ago than the master config's
    `lost_agent_retention` (an agent gone for good stops cluttering the views)."""
    heartbeats.flush()  # show the latest stats and last_seen
    query = select(Agent).options(selectinload(Agent.slots)).order_by(Agent.id)
    retention = current_app.config["DET"].lost_agent_retention
    if not all_agents and retention > 0:
        cutoff = utcnow() - timedelta(seconds=retention)
        query = query.where(or_(Agent.state != AgentState.LOST, Agent.last_seen >= cutoff))
    agents = list(db.session.execute(query).scalars().all())
    held = [s.allocation_id for a in agents for s in a.slots if s.allocation_id]
    trial_of: dict[str, int | None] = {}
    if held:
        rows = db.session.execute(
            select(Allocation.id, Allocation.trial_id).where(Allocation.id.in_(held))
        )
        trial_of = {aid: tid for aid, tid in rows}
    return [agent_json(a, trial_of) for a in agents]
