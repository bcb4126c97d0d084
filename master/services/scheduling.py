"""The scheduling pass: read the queue and free slots, ask the pure scheduler, apply its answer.

It runs on an APScheduler tick and right away whenever something changes (a submission, an
exit, an agent joining), so nobody waits for a tick.
"""

from __future__ import annotations

import logging

from flask import current_app
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from master.context import master_state
from master.db import db
from master.models import Agent, Allocation, Experiment, Trial
from master.notify import agent_key, hub
from master.scheduler import AgentView, PoolPolicy, Request, Running, schedule
from master.services.allocations import containers_of, create_allocation, request_preemption
from master.services.logs import write_master_line
from master.states import LIVE_ALLOCATION, AgentState, State

log = logging.getLogger("detlab.scheduler")


def job_order(exp: Experiment) -> float:
    """The FIFO key within a priority: the submission time unless moved by hand."""
    if exp.queue_order is not None:
        return exp.queue_order
    return exp.created_at.timestamp()


def queued_trials() -> list[tuple[Trial, Experiment]]:
    """ACTIVE trials of ACTIVE experiments that have work and no live allocation."""
    live = select(Allocation.trial_id).where(Allocation.state.in_(LIVE_ALLOCATION))
    q = (
        select(Trial, Experiment)
        .join(Experiment, Trial.experiment_id == Experiment.id)
        .where(
            Trial.state == State.ACTIVE,
            Experiment.state == State.ACTIVE,
            Trial.searcher_target > Trial.searcher_completed,
            Trial.id.not_in(live),
        )
    )
    # An unmanaged experiment's trial runs wherever its user started it: never scheduled.
    return [(t, e) for t, e in db.session.execute(q).all() if not e.config.get("unmanaged")]


def _running() -> list[tuple[Allocation, Trial, Experiment]]:
    q = (
        select(Allocation, Trial, Experiment)
        .join(Trial, Allocation.trial_id == Trial.id)
        .join(Experiment, Trial.experiment_id == Experiment.id)
        .where(Allocation.state.in_(LIVE_ALLOCATION))
    )
    return [(a, t, e) for a, t, e in db.session.execute(q).all()]


def _max_slots(exp: Experiment) -> int | None:
    value = exp.config.get("resources", {}).get("max_slots")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _policy(pool: str) -> PoolPolicy:
    for p in current_app.config["DET"].resource_pools:
        if p.name == pool:
            sched = p.scheduler or {}
            return PoolPolicy(
                type=str(sched.get("type", "priority")),
                preemption=bool(sched.get("preemption", False)),
                fitting_policy=str(sched.get("fitting_policy", "best")),
            )
    return PoolPolicy()


def scheduler_inputs(
    queued: list[tuple[Trial, Experiment]],
) -> tuple[list[Request], list[Running], dict[str, Allocation]]:
    """The pure scheduler's view of the queue and of what runs (shared with the queue listing)."""
    requests = [
        Request(
            id=str(t.id),
            job_id=str(e.id),
            slots=int(e.config["resources"].get("slots_per_trial", 1)),
            priority=e.priority,
            order=job_order(e) + t.id * 1e-9,
            pool=e.resource_pool,
            weight=e.weight,
            max_slots=_max_slots(e),
        )
        for t, e in queued
    ]
    running_rows = _running()
    allocs_by_trial = {str(t.id): a for a, t, _ in running_rows}
    running = [
        Running(
            id=str(t.id),
            job_id=str(e.id),
            placements=tuple(
                (agent_id, tuple(c.get("slots") or ()))
                for agent_id, c in sorted(
                    containers_of(a).items(), key=lambda kv: kv[1].get("rank", 0)
                )
            ),
            priority=e.priority,
            order=job_order(e) + t.id * 1e-9,
            pool=e.resource_pool,
            weight=e.weight,
            max_slots=_max_slots(e),
            preemptible=True,
            preempting=bool(a.preempt_requested or a.kill_requested),
        )
        for a, t, e in running_rows
    ]
    return requests, running, allocs_by_trial


def schedule_pass() -> int:
    """One pass over every pool; returns how many allocations it created.

    Caller has an app context. Preemptions only send the signal: the slots are reassigned in a
    later pass, once the preempted trial has checkpointed and exited.
    """
    ms = master_state()
    with ms.state_lock:
        queued = queued_trials()
        if not queued:
            ms.waiting_reasons.clear()
            db.session.commit()
            return 0
        # Only the pools with queued work, with every agent's slots in one query.
        pools = {e.resource_pool for _, e in queued}
        agents = list(
            db.session.execute(
                select(Agent)
                .where(Agent.state == AgentState.ACTIVE, Agent.resource_pool.in_(pools))
                .options(selectinload(Agent.slots))
            ).scalars()
        )
        views = [
            AgentView(
                id=a.id,
                pool=a.resource_pool,
                free=tuple(s.index for s in a.slots if s.enabled and s.allocation_id is None),
                total=sum(1 for s in a.slots if s.enabled),
            )
            for a in agents
        ]
        requests, running, allocs_by_trial = scheduler_inputs(queued)
        trials = {str(t.id): t for t, _ in queued}
        woken: set[str] = set()
        created = 0
        waiting: dict[int, str] = {}
        for pool in sorted({r.pool for r in requests}):
            decision = schedule(
                _policy(pool),
                [r for r in requests if r.pool == pool],
                [r for r in running if r.pool == pool],
                [v for v in views if v.pool == pool],
            )
            for a in decision.assignments:
                trial = trials[a.request_id]
                alloc: Allocation | None = create_allocation(trial, a.placements)
                where = "; ".join(
                    f"agent {agent_id} (slots {', '.join(map(str, slots)) or 'none'})"
                    for agent_id, slots in a.placements
                )
                write_master_line(trial.id, alloc, f"scheduled on {where}")
                woken.update(agent_id for agent_id, _ in a.placements)
                created += 1
            for victim in decision.preemptions:
                alloc = allocs_by_trial.get(victim)
                if alloc is None or not request_preemption(alloc, alloc.trial_id):
                    continue
                write_master_line(
                    alloc.trial_id,
                    alloc,
                    "preempted to make room for other work; it checkpoints, exits and queues again",
                )
            waiting.update({int(k): v for k, v in decision.waiting.items()})
        ms.waiting_reasons.clear()
        ms.waiting_reasons.update(waiting)
        db.session.commit()
    for agent_id in woken:
        hub().notify(agent_key(agent_id))
    return created
