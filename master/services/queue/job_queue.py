"""The job queue: every experiment with queued or running trials is a job in its pool's queue.

The listing and the scheduler use the same order (priority, then the FIFO key, which a person
can change by moving a job ahead of or behind another).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flask import current_app
from sqlalchemy import func, select
from sqlalchemy.orm import selectinload

from detlab.expconf import limits
from master.context import master_state, state_lock
from master.db import db, iso
from master.errors import BadRequest, NotFound
from master.models import Agent, Allocation, Experiment, Task, Trial
from master.rm.registry import resource_manager
from master.scheduler import PoolPolicy, queue_order
from master.services.queue.job_queue_tasks import task_job_rows, task_jobs, task_sort_key
from master.services.queue.scheduling import job_order, queued_trials, scheduler_inputs
from master.services.task.tasks import trial_task_id
from master.states import LIVE_ALLOCATION, AgentState, AllocationState, State


def _sort_key(exp: Experiment) -> tuple[int, float, int]:
    return (exp.priority, job_order(exp), exp.id)


def pool_policies() -> dict[str, dict[str, Any]]:
    pools = {}
    for p in current_app.config["DET"].resource_pools:
        sched = dict(p.scheduler or {})
        pools[p.name] = {
            "name": p.name,
            "description": p.description,
            "scheduler": {
                "type": sched.get("type", "priority"),
                "preemption": bool(sched.get("preemption", False)),
                "fitting_policy": sched.get("fitting_policy", "best"),
            },
        }
    return pools


def backend_reasons_by_exp() -> dict[int, str]:
    """Experiment id -> why one of its submitted (ASSIGNED) trials waits in its backend's queue
    (Slurm's pending reason). Only a backend writes reasons for tasks with a live allocation:
    the scheduling pass keeps those and drops its own for tasks it placed."""
    reasons = master_state().scheduling.waiting_reasons
    if not reasons:
        return {}
    assigned = db.session.execute(
        select(Allocation.task_id).where(
            Allocation.state == AllocationState.ASSIGNED, Allocation.trial_id.is_not(None)
        )
    ).scalars()
    out: dict[int, str] = {}
    for task_id in assigned:
        exp_id, _, _ = task_id.partition(".")
        if task_id in reasons and exp_id.isdigit():
            out.setdefault(int(exp_id), reasons[task_id])
    return out


def _started_in_backend(exp_ids: set[int]) -> dict[int, int]:
    """Experiment id -> its allocations whose backend job runs: RUNNING, or still ASSIGNED
    while Slurm runs the job and its harness has not reported yet (the job holds its slots)."""
    if not exp_ids:
        return {}
    rows = db.session.execute(
        select(Trial.experiment_id, Allocation)
        .join(Allocation, Allocation.trial_id == Trial.id)
        .where(Allocation.state.in_(LIVE_ALLOCATION), Trial.experiment_id.in_(exp_ids))
    ).all()
    out: dict[int, int] = {}
    for exp_id, alloc in rows:
        started = alloc.state == AllocationState.RUNNING or any(
            c.get("started_at") for c in (alloc.containers or {}).values()
        )
        out[exp_id] = out.get(exp_id, 0) + int(started)
    return out


def _slots(exp: Experiment) -> int:
    return exp.conf.resources.slots_per_trial


def queue_jobs(pool: str | None = None) -> list[dict[str, Any]]:
    """Every pool with its jobs in queue order: experiments and every other task that queues
    or runs (commands), ordered together as the scheduler considers them."""
    policies = pool_policies()
    tasks = task_jobs()
    queued_by_exp: dict[int, list[Trial]] = {}
    queued_pairs = queued_trials()
    for trial, exp in queued_pairs:
        queued_by_exp.setdefault(exp.id, []).append(trial)
    running_rows = db.session.execute(
        select(Trial.experiment_id, func.count(Allocation.id))
        .join(Allocation, Allocation.trial_id == Trial.id)
        .where(Allocation.state.in_(LIVE_ALLOCATION))
        .group_by(Trial.experiment_id)
    ).all()
    running_by_exp = {eid: n for eid, n in running_rows}
    # Allocations a backend that queues itself (Slurm) holds back: their reason is the backend's.
    held = backend_reasons_by_exp()
    exp_ids = set(queued_by_exp) | set(running_by_exp)
    last_ran = _last_allocation_end(set(queued_by_exp) - set(running_by_exp))
    exps = (
        list(db.session.execute(select(Experiment).where(Experiment.id.in_(exp_ids))).scalars())
        if exp_ids
        else []
    )
    pools = []
    for name, policy in policies.items():
        if pool and name != pool:
            continue
        agents = list(
            db.session.execute(
                select(Agent)
                .where(Agent.resource_pool == name, Agent.state == AgentState.ACTIVE)
                .options(selectinload(Agent.slots))
            ).scalars()
        )
        total = sum(1 for a in agents for s in a.slots if s.enabled)
        used = sum(1 for a in agents for s in a.slots if s.enabled and s.allocation_id)
        rm = resource_manager(name)
        if rm.queues_itself:  # its capacity is the backend's (sinfo), not agents' slots
            members = [e for e in exps if e.resource_pool == name]
            total = sum(v.total for v in rm.capacity({name}))
            started = _started_in_backend({e.id for e in members})
            used = sum(_slots(e) * started.get(e.id, 0) for e in members)
        exp_rows: dict[str, dict[str, Any]] = {}
        for exp in (e for e in exps if e.resource_pool == name):
            exp_rows[str(exp.id)] = _experiment_job(
                exp,
                queued_by_exp.get(exp.id, []),
                running_by_exp.get(exp.id, 0),
                last_ran,
                held.get(exp.id),
            )
        task_members = tasks.in_pool(name)
        rows = {**exp_rows, **task_job_rows(task_members)}
        # One order for both kinds: priority, then the FIFO key; at a tie an experiment first.
        keys: dict[str, tuple[int, float, int, int, str]] = {
            str(e.id): (*_sort_key(e)[:2], 0, e.id, "") for e in exps if e.resource_pool == name
        }
        keys.update({t.id: (*task_sort_key(t)[:2], 1, 0, t.id) for t, _ in task_members})
        order = sorted(rows, key=keys.__getitem__)
        if policy["scheduler"]["type"] == "fair_share" and rows:
            order = _fair_share_order(order, queued_pairs, task_members, name)
        jobs = []
        for position, job_id in enumerate(order, start=1):
            jobs.append({**rows[job_id], "position": position, "jobs_ahead": position - 1})
        pools.append(
            {
                **policy,
                "slots_total": total,
                "slots_used": used,
                # What is wrong with a backend's pool (Slurm: its nodes are down or drained).
                "note": getattr(rm, "pool_notes", {}).get(name),
                "agents": len(agents),
                "jobs": jobs,
            }
        )
    if pool and not pools:
        raise NotFound(f"no resource pool {pool!r}")
    return pools


def _experiment_job(
    exp: Experiment,
    queued: list[Trial],
    running: int,
    last_ran: dict[int, Any],
    held: str | None = None,
) -> dict[str, Any]:
    """An experiment's job row: all its trials are one job (position is the caller's to set)."""
    slots = _slots(exp)
    waiting_reasons = master_state().scheduling.waiting_reasons
    reason = next(
        (
            waiting_reasons[tid]
            for tid in (trial_task_id(exp.id, t.request_id) for t in queued)
            if tid in waiting_reasons
        ),
        None,
    )
    return {
        "job_id": str(exp.id),
        "type": "EXPERIMENT",
        "task_id": None,
        "experiment_id": exp.id,
        "experiment_state": exp.state.value,
        "task_state": None,
        "name": exp.name,
        "user": exp.owner.username if exp.owner else None,
        "owner_id": exp.owner_id,
        "state": "SCHEDULED" if running else "QUEUED",
        "priority": exp.priority,
        "weight": exp.weight,
        "resource_pool": exp.resource_pool,
        "preemptible": True,
        "slots_requested": slots * (len(queued) + running),
        "slots_held": slots * running,
        "trials_queued": len(queued),
        "trials_running": running,
        "submitted_at": iso(exp.created_at),
        # WAIT counts from here: the later of submission and the end of the job's
        # last allocation (a job whose trials ran has not waited since submission).
        "waiting_since": iso(max(exp.created_at, last_ran.get(exp.id, exp.created_at)))
        if not running
        else None,
        # A backend that queues itself (Slurm) holds submitted trials back: its reason then.
        "reason": reason if queued else held,
    }


def _last_allocation_end(exp_ids: set[int]) -> dict[int, Any]:
    """When each experiment's latest allocation ended (only experiments that ran before)."""
    if not exp_ids:
        return {}
    rows = db.session.execute(
        select(Trial.experiment_id, func.max(Allocation.ended_at))
        .join(Allocation, Allocation.trial_id == Trial.id)
        .where(Trial.experiment_id.in_(exp_ids), Allocation.ended_at.is_not(None))
        .group_by(Trial.experiment_id)
    ).all()
    return {eid: ended for eid, ended in rows if ended is not None}


def _fair_share_order(
    order: list[str],
    queued_pairs: list[tuple[Trial, Experiment]],
    task_members: list[tuple[Task, bool]],
    pool: str,
) -> list[str]:
    """The order the fair-share scheduler considers the pool's jobs in (least served first);
    `order` is the priority order, kept among jobs the scheduler ranks alike."""
    queued = [(t, e) for t, e in queued_pairs if e.resource_pool == pool]
    commands = [t for t, running in task_members if not running]
    requests, running, _ = scheduler_inputs(queued, commands)
    considered = queue_order(
        [r for r in requests if r.pool == pool],
        [r for r in running if r.pool == pool],
        PoolPolicy(type="fair_share"),
    )
    rank = {job: i for i, job in enumerate(considered)}
    return sorted(order, key=lambda job: rank.get(job, len(rank)))


def find_job(job_id: str) -> dict[str, Any] | None:
    for p in queue_jobs():
        for job in p["jobs"]:
            if job["job_id"] == job_id:
                return job
    return None


def _job_experiment(job_id: str) -> Experiment:
    try:
        exp = db.session.get(Experiment, int(job_id))
    except ValueError:
        exp = None
    if exp is None:
        raise NotFound(f"job {job_id} not found")
    return exp


def update_job(job_id: str, body: dict[str, Any]) -> Experiment:
    """Change priority, weight, pool or queue position. Caller checks ownership."""
    allowed = {"priority", "weight", "resource_pool", "ahead_of", "behind_of"}
    unknown = set(body) - allowed
    if unknown:
        key = sorted(unknown)[0]
        raise BadRequest(f"unknown field {key!r}; expected one of {sorted(allowed)}", path=key)
    if "ahead_of" in body and "behind_of" in body:
        raise BadRequest("give ahead_of or behind_of, not both", path="ahead_of")
    with state_lock():
        exp = _job_experiment(job_id)
        if exp.state not in (State.ACTIVE, State.PAUSED):
            raise BadRequest(f"job {job_id} is {exp.state.value}; only active jobs can be changed")
        if "priority" in body:
            p = body["priority"]
            if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 99:
                raise BadRequest("priority must be an integer from 1 to 99", path="priority")
            exp.priority = p
            _set_config(exp, "priority", p)
        if "weight" in body:
            w = body["weight"]
            if (
                isinstance(w, bool)
                or not isinstance(w, int | float)
                or not 0 < w <= limits.MAX_WEIGHT
            ):
                raise BadRequest(
                    f"weight must be a number > 0 and at most {limits.MAX_WEIGHT:g}",
                    path="weight",
                )
            exp.weight = float(w)
            _set_config(exp, "weight", float(w))
        if "resource_pool" in body:
            _move_pool(exp, body["resource_pool"])
        for key in ("ahead_of", "behind_of"):
            if key in body:
                _reorder(exp, str(body[key]), ahead=key == "ahead_of")
        db.session.commit()
    return exp


def _set_config(exp: Experiment, key: str, value: Any) -> None:
    exp.conf = exp.conf.replace(resources=dataclasses.replace(exp.conf.resources, **{key: value}))


def _move_pool(exp: Experiment, pool: Any) -> None:
    names = [p.name for p in current_app.config["DET"].resource_pools]
    if not isinstance(pool, str) or pool not in names:
        raise BadRequest(
            f"unknown resource pool {pool!r}; this cluster has {', '.join(names)}",
            path="resource_pool",
        )
    if pool == exp.resource_pool:
        return
    exp.resource_pool = pool
    _set_config(exp, "resource_pool", pool)
    # Running trials leave their slots (checkpoint + exit) and queue again in the new pool.
    from master.services.experiment.experiments import preempt_trial

    for trial in exp.trials:
        preempt_trial(trial)


def _reorder(exp: Experiment, other_id: str, *, ahead: bool) -> None:
    other = _job_experiment(other_id)
    if other.id == exp.id:
        raise BadRequest(
            "a job cannot move relative to itself", path="ahead_of" if ahead else "behind_of"
        )
    if other.resource_pool != exp.resource_pool:
        raise BadRequest(
            f"job {other_id} is in pool {other.resource_pool!r}, job {exp.id} in "
            f"{exp.resource_pool!r}; move pools first",
            path="ahead_of" if ahead else "behind_of",
        )
    # Taking the other job's priority is what makes "ahead of" mean ahead in the queue.
    exp.priority = other.priority
    _set_config(exp, "priority", other.priority)
    same = sorted(
        (
            e
            for e in db.session.execute(
                select(Experiment).where(
                    Experiment.resource_pool == exp.resource_pool,
                    Experiment.priority == other.priority,
                    Experiment.state.in_((State.ACTIVE, State.PAUSED)),
                    Experiment.id != exp.id,
                )
            ).scalars()
        ),
        key=_sort_key,
    )
    idx = next(i for i, e in enumerate(same) if e.id == other.id)
    anchor = job_order(other)
    if ahead:
        prev = job_order(same[idx - 1]) if idx > 0 else anchor - 2.0
        exp.queue_order = (prev + anchor) / 2
    else:
        nxt = job_order(same[idx + 1]) if idx + 1 < len(same) else anchor + 2.0
        exp.queue_order = (anchor + nxt) / 2


__all__ = ["job_order", "queue_jobs", "update_job"]
