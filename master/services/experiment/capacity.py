"""Whether an experiment's trials can ever fit its resource pool, checked at submit.

A `slots_per_trial: 2` experiment on a 1-slot pool would queue forever without a word: the
submit reply carries a warning with the pool's capacity instead (Determined's launch warning),
and `fail_if_cannot_fit` turns it into a 400. Capacity is what the pool's connected agents offer
now (enabled slots of ACTIVE agents; only the largest agent for `is_single_node`); an elastic
pool (with a provider) can grow, so it is never warned about.
"""

from __future__ import annotations

from flask import current_app
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from detlab.expconf import ExperimentConfig
from master.db import db
from master.models import Agent
from master.states import AgentState


def pool_slots(pool: str) -> list[int]:
    """The enabled slots of each ACTIVE agent of `pool`."""
    agents = db.session.execute(
        select(Agent)
        .options(selectinload(Agent.slots))
        .where(Agent.state == AgentState.ACTIVE, Agent.resource_pool == pool)
    ).scalars()
    return [sum(1 for s in a.slots if s.enabled) for a in agents]


def fit_warning(conf: ExperimentConfig) -> str | None:
    """Why the experiment's trials cannot be scheduled on its pool as it is now, or None."""
    need = conf.resources.slots_per_trial
    pool = conf.resources.resource_pool
    if need <= 0 or _elastic(pool):
        return None
    per_agent = pool_slots(pool)
    single = conf.resources.is_single_node
    have = max(per_agent, default=0) if single else sum(per_agent)
    return cannot_fit_message(need, pool, have, len(per_agent), single)


def cannot_fit_message(need: int, pool: str, have: int, agents: int, single: bool) -> str | None:
    if need <= have:
        return None
    where = "its largest agent has" if single else "its connected agents have"
    return (
        f"resources.slots_per_trial is {need} but resource pool {pool!r} has {have} slot"
        f"{'' if have == 1 else 's'} now ({agents} agent{'' if agents == 1 else 's'}; {where} "
        f"{have}): the trials wait in the queue until agents with more slots join "
        f"(det experiment create --fail-if-cannot-fit refuses such an experiment)"
    )


def _elastic(pool: str) -> bool:
    for p in current_app.config["DET"].resource_pools:
        if p.name == pool:
            return p.provider is not None
    return False
