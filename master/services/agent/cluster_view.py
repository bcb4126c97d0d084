"""The cluster at a glance for people: agents with their slots (and who holds them)."""

from __future__ import annotations

from master.services.agent.agent_listing import list_agents

# A slot held by a trial whose device is this idle looks wasted (shown flagged).
IDLE_UTIL_PERCENT = 5.0


def agents_overview() -> list[dict]:
    """Every agent as `GET /api/v1/agents` shows it (the same service), with the latest stats."""
    return list_agents()


def idle_but_allocated(slot: dict) -> bool:
    stats = slot.get("stats") or {}
    util = stats.get("util_percent")
    return (
        bool(slot.get("allocation_id"))
        and isinstance(util, int | float)
        and (util < IDLE_UTIL_PERCENT)
    )
