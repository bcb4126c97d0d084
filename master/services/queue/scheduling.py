"""The scheduling pass: read the queue and free slots, ask the pure scheduler, apply its answer.

It runs on an APScheduler tick and right away whenever something changes (a submission, an
exit, an agent joining), so nobody waits for a tick.
"""

from __future__ import annotations

import logging

from flask import current_app
from sqlalchemy import select

from master.context import master_state
from master.db import db
from master.models import Allocation, Experiment, Task, Trial, User
from master.notify import agent_key, hub
from master.rm.base import ResourceManager
from master.rm.registry import managers_that_pull, pools_by_manager, resource_manager
from master.scheduler import Decision, PoolPolicy, Request, Running, schedule
from master.scheduler.priority import request_key
from master.services.agent.agent_users import task_user
from master.services.task.allocations import containers_of
from master.services.task.tasks import trial_task_id
from master.services.trial.logs import write_line
from master.states import LIVE_ALLOCATION, State, TaskState, TaskType

log = logging.getLogger("detlab.scheduler")


def job_order(exp: Experiment) -> float:
    """The FIFO key within a priority: the submission time unless moved by hand."""
    if exp.queue_order is not None:
        return exp.queue_order
    return exp.created_at.timestamp()


def queued_trials() -> list[tuple[Trial, Experiment]]:
    """ACTIVE trials of ACTIVE experiments that have work and no live allocation."""
    # Only trials' allocations: a command's has no trial_id, and one NULL in a NOT IN list makes
    # the test unknown for every row (SQL's three-valued logic), so no trial would ever queue
    # while a command runs.
    live = select(Allocation.trial_id).where(
        Allocation.state.in_(LIVE_ALLOCATION), Allocation.trial_id.is_not(None)
    )
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
    return [(t, e) for t, e in db.session.execute(q).all() if not e.conf.unmanaged]


def queued_commands() -> list[Task]:
    """ACTIVE tasks other than trials with no live allocation (commands, for now)."""
    live = select(Allocation.task_id).where(Allocation.state.in_(LIVE_ALLOCATION))
    return list(
        db.session.execute(
            select(Task).where(
                Task.type != TaskType.TRIAL,
                Task.state == TaskState.ACTIVE,
                Task.id.not_in(live),
            )
        ).scalars()
    )


def _running() -> list[tuple[Allocation, Trial | None, Experiment | None]]:
    q = (
        select(Allocation, Trial, Experiment)
        .outerjoin(Trial, Allocation.trial_id == Trial.id)
        .outerjoin(Experiment, Trial.experiment_id == Experiment.id)
        .where(Allocation.state.in_(LIVE_ALLOCATION))
    )
    return [(a, t, e) for a, t, e in db.session.execute(q).all()]


def _max_slots(exp: Experiment) -> int | None:
    return exp.conf.resources.max_slots


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


def _owner_uid(user: User | None) -> int | None:
    """The Unix uid an agent runs `user`'s tasks as when it cannot isolate them (the linked
    one, or the master's default): such agents take only tasks whose uid is their own."""
    if user is None:
        return None
    return task_user(user, current_app.config["DET"].agent_user_group).uid


def _trial_request(t: Trial, e: Experiment) -> Request:
    return Request(
        id=trial_task_id(e.id, t.request_id),
        job_id=str(e.id),
        slots=e.conf.resources.slots_per_trial,
        priority=e.priority,
        order=job_order(e),
        seq=t.id,
        pool=e.resource_pool,
        weight=e.weight,
        max_slots=_max_slots(e),
        unix_uid=_owner_uid(e.owner),
        owner=e.owner.username,
    )


def _command_request(task: Task) -> Request:
    owner = db.session.get(User, task.owner_id) if task.owner_id is not None else None
    return Request(
        id=task.id,
        slots=task.slots or 0,
        priority=task.priority or 42,
        order=task.created_at.timestamp(),
        pool=task.resource_pool or "default",
        unix_uid=_owner_uid(owner),
        owner=owner.username if owner else "",
    )


def _placements(a: Allocation) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(
        (agent_id, tuple(c.get("slots") or ()))
        for agent_id, c in sorted(containers_of(a).items(), key=lambda kv: kv[1].get("rank", 0))
    )


def _running_view(a: Allocation, t: Trial | None, e: Experiment | None) -> Running:
    stopping = bool(a.preempt_requested or a.kill_requested)
    if t is not None and e is not None:
        return Running(
            id=a.task_id,
            job_id=str(e.id),
            placements=_placements(a),
            priority=e.priority,
            order=job_order(e),
            seq=t.id,
            pool=e.resource_pool,
            weight=e.weight,
            max_slots=_max_slots(e),
            preemptible=True,
            preempting=stopping,
        )
    task = a.task
    return Running(
        id=task.id,
        job_id="",
        placements=_placements(a),
        priority=task.priority or 42,
        order=task.created_at.timestamp(),
        pool=task.resource_pool or "default",
        preemptible=task.preemptible,
        preempting=stopping,
    )


def scheduler_inputs(
    queued: list[tuple[Trial, Experiment]], commands: list[Task] | None = None
) -> tuple[list[Request], list[Running], dict[str, Allocation]]:
    """The pure scheduler's view of the queue and of what runs (shared with the queue listing):
    requests and running work keyed by task id, and each running task's live allocation."""
    requests = [_trial_request(t, e) for t, e in queued]
    requests += [_command_request(task) for task in commands or ()]
    running_rows = _running()
    allocs_by_task = {a.task_id: a for a, _, _ in running_rows}
    running = [_running_view(a, t, e) for a, t, e in running_rows]
    return requests, running, allocs_by_task


def pending_requests(pool: str) -> list[Request]:
    """Every queued request of one pool, whatever its task type (trials and commands alike):
    what the provisioner sizes the pool's cloud agents for."""
    queued = [(t, e) for t, e in queued_trials() if e.resource_pool == pool]
    commands = [task for task in queued_commands() if (task.resource_pool or "default") == pool]
    requests, _, _ = scheduler_inputs(queued, commands)
    return requests


def schedule_pass() -> int:
    """One pass over every pool; returns how many allocations it created.

    Caller has an app context. Each pool's capacity comes from its resource manager, which also
    starts what the scheduler assigns and preempts its victims. Preemptions only send the signal:
    the slots are reassigned in a later pass, once the preempted task has exited.
    """
    ms = master_state()
    with ms.state_lock:
        for puller in managers_that_pull():
            puller.refresh()  # exits first: what ended frees its place before the pass
        queued = queued_trials()
        commands = queued_commands()
        backend_reasons = _backend_reasons(ms.scheduling.waiting_reasons)
        if not queued and not commands:
            ms.scheduling.waiting_reasons.clear()
            ms.scheduling.waiting_reasons.update(backend_reasons)
            db.session.commit()
            return 0
        tasks: dict[str, Task] = {t.id: t for t in commands}
        for trial, exp in queued:
            tasks[trial_task_id(exp.id, trial.request_id)] = _task_of(trial, exp)
        requests, running, allocs_by_task = scheduler_inputs(queued, commands)
        woken: set[str] = set()
        created = 0
        waiting: dict[str, str] = {}
        for _rm, pools in sorted(pools_by_manager({r.pool for r in requests}).items()):
            rm = resource_manager(next(iter(pools)))
            if rm.queues_itself:
                mine = [r for r in requests if r.pool in pools]
                created += _submit_all(rm, pools, mine, tasks, waiting)
                continue
            views = rm.capacity(pools)
            for pool in sorted(pools):
                decision = schedule(
                    _policy(pool),
                    [r for r in requests if r.pool == pool],
                    [r for r in running if r.pool == pool],
                    [v for v in views if v.pool == pool],
                )
                created += _apply(rm, decision, tasks, allocs_by_task, woken)
                waiting.update(decision.waiting)
        ms.scheduling.waiting_reasons.clear()
        ms.scheduling.waiting_reasons.update(backend_reasons)
        ms.scheduling.waiting_reasons.update(waiting)
        db.session.commit()
    for agent_id in woken:
        hub().notify(agent_key(agent_id))
    return created


def _backend_reasons(reasons: dict[str, str]) -> dict[str, str]:
    """The reasons a backend with its own queue gave (Slurm's pending reasons) for tasks whose
    allocation is live: they outlive the pass, which only knows why requests wait."""
    live = set(
        db.session.execute(
            select(Allocation.task_id).where(Allocation.state.in_(LIVE_ALLOCATION))
        ).scalars()
    )
    return {k: v for k, v in reasons.items() if k in live}


def _submit_all(
    rm: ResourceManager,
    pools: set[str],
    requests: list[Request],
    tasks: dict[str, Task],
    waiting: dict[str, str],
) -> int:
    """A backend that queues itself gets every request of its pools that are up, in the
    scheduler's order (priority, then submission): it decides when each runs. A pool the
    backend does not show as up (a partition down or drained, slurmctld not answering) keeps
    its requests queued here, with the reason, rather than failing their submissions."""
    up = {v.pool for v in rm.capacity(pools)}
    started = 0
    for req in sorted(requests, key=request_key):
        if req.pool not in up:
            # The backend's own word when it has one (Slurm: munge fails, a partition is down).
            note = getattr(rm, "pool_notes", {}).get(req.pool)
            waiting[req.id] = (
                f"resource pool {req.pool!r} is not available from resource manager "
                f"{rm.name!r} ({rm.type}): "
                + (note or "its partition is down or the backend does not answer")
            )
            continue
        rm.start(tasks[req.id], ())
        started += 1
    return started


def _task_of(trial: Trial, exp: Experiment) -> Task:
    task = db.session.get(Task, trial_task_id(exp.id, trial.request_id))
    assert task is not None, f"trial {trial.id} has no task"
    return task


def _apply(
    rm: ResourceManager,
    decision: Decision,
    tasks: dict[str, Task],
    allocs_by_task: dict[str, Allocation],
    woken: set[str],
) -> int:
    """Start the assignments and send the preemptions of one pool's decision."""
    for a in decision.assignments:
        alloc = rm.start(tasks[a.request_id], a.placements)
        where = "; ".join(
            f"agent {agent_id} (slots {', '.join(map(str, slots)) or 'none'})"
            for agent_id, slots in a.placements
        )
        write_line(alloc, f"scheduled on {where}")
        woken.update(agent_id for agent_id, _ in a.placements)
    for victim in decision.preemptions:
        running = allocs_by_task.get(victim)
        if running is None or not rm.preempt(running):
            continue
        write_line(
            running,
            "preempted to make room for other work; it checkpoints, exits and queues again"
            if running.trial_id is not None
            else "preempted to make room for other work; it is stopped and queues again",
        )
    return len(decision.assignments)
