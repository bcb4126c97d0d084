"""The scheduling pass: read the queue and free slots, ask the pure scheduler, apply its answer.

It runs on an APScheduler tick and right away whenever something changes (a submission, an
exit, an agent joining), so nobody waits for a tick.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from datetime import timedelta

from flask import Flask, current_app
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from master.auth import new_token
from master.db import db, utcnow
from master.models import Agent, Allocation, Experiment, Slot, Trial
from master.notify import agent_key, hub, preempt_key
from master.scheduler import AgentView, PoolPolicy, Request, Running, schedule
from master.services import STATE_LOCK
from master.services.logs import write_master_line
from master.states import State

log = logging.getLogger("detlab.scheduler")

# Why each queued trial waits (trial id -> reason), for the queue view; refreshed every pass.
waiting_reasons: dict[int, str] = {}


def job_order(exp: Experiment) -> float:
    """The FIFO key within a priority: the submission time unless moved by hand."""
    if exp.queue_order is not None:
        return exp.queue_order
    return exp.created_at.timestamp()


def queued_trials() -> list[tuple[Trial, Experiment]]:
    """ACTIVE trials of ACTIVE experiments that have work and no live allocation."""
    live = select(Allocation.trial_id).where(Allocation.state.in_(("ASSIGNED", "RUNNING")))
    q = (
        select(Trial, Experiment)
        .join(Experiment, Trial.experiment_id == Experiment.id)
        .where(
            Trial.state == State.ACTIVE.value,
            Experiment.state == State.ACTIVE.value,
            Trial.searcher_target > Trial.searcher_completed,
            Trial.id.not_in(live),
        )
    )
    return [(t, e) for t, e in db.session.execute(q).all()]


def _running() -> list[tuple[Allocation, Trial, Experiment]]:
    q = (
        select(Allocation, Trial, Experiment)
        .join(Trial, Allocation.trial_id == Trial.id)
        .join(Experiment, Trial.experiment_id == Experiment.id)
        .where(Allocation.state.in_(("ASSIGNED", "RUNNING")))
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
    with STATE_LOCK:
        queued = queued_trials()
        if not queued:
            waiting_reasons.clear()
            db.session.commit()
            return 0
        # Only the pools with queued work, with every agent's slots in one query.
        pools = {e.resource_pool for _, e in queued}
        agents = list(
            db.session.execute(
                select(Agent)
                .where(Agent.state == "ACTIVE", Agent.resource_pool.in_(pools))
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
        waiting_reasons.clear()
        for pool in sorted({r.pool for r in requests}):
            decision = schedule(
                _policy(pool),
                [r for r in requests if r.pool == pool],
                [r for r in running if r.pool == pool],
                [v for v in views if v.pool == pool],
            )
            for a in decision.assignments:
                trial = trials[a.request_id]
                alloc = create_allocation(trial, a.placements)
                where = "; ".join(
                    f"agent {agent_id} (slots {', '.join(map(str, slots)) or 'none'})"
                    for agent_id, slots in a.placements
                )
                write_master_line(trial.id, alloc, f"scheduled on {where}")
                woken.update(agent_id for agent_id, _ in a.placements)
                created += 1
            for victim in decision.preemptions:
                alloc = allocs_by_trial.get(victim)
                if alloc is None or alloc.preempt_requested:
                    continue
                alloc.preempt_requested = True
                alloc.preempt_requested_at = utcnow()
                write_master_line(
                    alloc.trial_id,
                    alloc,
                    "preempted to make room for other work; it checkpoints, exits and queues again",
                )
                hub.notify(preempt_key(alloc.id))
            waiting_reasons.update({int(k): v for k, v in decision.waiting.items()})
        db.session.commit()
    for agent_id in woken:
        hub.notify(agent_key(agent_id))
    return created


def allocation_generation() -> int:
    """Moves whenever an allocation is created or ends (per app): cheap cache invalidation."""
    return current_app.extensions.get("det_alloc_gen", 0)


def bump_allocation_generation() -> None:
    """Mark that allocations changed; the generation moves when this transaction commits.

    Moving it before the commit would let a concurrent reader cache the old state under the
    new generation.
    """
    db.session.info["det_alloc_changed"] = True


def after_commit(session) -> None:  # type: ignore[no-untyped-def]
    """SQLAlchemy `after_commit` hook (registered by the app factory)."""
    if session.info.pop("det_alloc_changed", False):
        current_app.extensions["det_alloc_gen"] = allocation_generation() + 1


def create_allocation(
    trial: Trial, placements: tuple[tuple[str, tuple[int, ...]], ...]
) -> Allocation:
    """Reserve the slots of every placement; one container per agent, ranked in order."""
    chief, chief_slots = placements[0]
    alloc = Allocation(
        id=str(uuid.uuid4()),
        trial_id=trial.id,
        agent_id=chief,
        state="ASSIGNED",
        slot_indexes=list(chief_slots),
        containers={
            agent_id: {"rank": rank, "slots": list(slots), "state": "ASSIGNED"}
            for rank, (agent_id, slots) in enumerate(placements)
        },
    )
    db.session.add(alloc)
    db.session.flush()
    bump_allocation_generation()
    for agent_id, slots in placements:
        if slots:
            db.session.execute(
                Slot.__table__.update()
                .where(Slot.agent_id == agent_id, Slot.index.in_(slots))
                .values(allocation_id=alloc.id)
            )
    return alloc


def containers_of(alloc: Allocation) -> dict[str, dict]:
    """Per-agent containers; allocations from before migration 0003 had one on `agent_id`."""
    if alloc.containers:
        return alloc.containers
    return {
        alloc.agent_id or "": {"rank": 0, "slots": list(alloc.slot_indexes), "state": alloc.state}
    }


# A Trial class entrypoint (`model_def:MyTrial`) runs through the harness's launcher.
TRIAL_CLASS = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def command_for(entrypoint: str) -> str:
    if TRIAL_CLASS.match(entrypoint.strip()):
        return f"python3 -m harness.launch {entrypoint.strip()}"
    return entrypoint


PREEMPTION_TIMEOUT = "killed: it ignored the preemption signal past the timeout"


def enforce_preemption_timeouts() -> None:
    """A trial that ignores the preemption signal past the timeout is killed."""
    timeout = current_app.config["DET"].preemption_timeout
    cutoff = utcnow() - timedelta(seconds=timeout)
    with STATE_LOCK:
        allocs = db.session.execute(
            select(Allocation).where(
                Allocation.state.in_(("ASSIGNED", "RUNNING")),
                Allocation.preempt_requested.is_(True),
                Allocation.kill_requested.is_(False),
                Allocation.preempt_requested_at < cutoff,
                (Allocation.exit_reason.is_(None)) | (Allocation.exit_reason != PREEMPTION_TIMEOUT),
            )
        ).scalars()
        woken = []
        for alloc in allocs:
            # Kill its containers, but as a preemption: the trial queues again afterwards.
            alloc.containers = {k: {**v, "kill": True} for k, v in containers_of(alloc).items()}
            alloc.exit_reason = PREEMPTION_TIMEOUT
            write_master_line(
                alloc.trial_id,
                alloc,
                f"trial did not stop within {timeout:g}s of the preemption signal; killing it",
            )
            woken.append(alloc)
        db.session.commit()
    for alloc in woken:
        hub.notify(preempt_key(alloc.id))
        for agent_id in containers_of(alloc):
            hub.notify(agent_key(agent_id))


def container_addrs(containers: dict[str, dict], agent_id: str) -> list[str]:
    """The address of each container of the allocation, in container-rank order (Determined's
    `ClusterInfo.container_addrs`): the address its agent polls the master from."""
    ranked = sorted(containers.items(), key=lambda kv: int(kv[1].get("rank", 0))) or [
        (agent_id, {})
    ]
    out = []
    for aid, _ in ranked:
        agent = db.session.get(Agent, aid)
        out.append((agent.address or agent.hostname or "") if agent else "")
    return out


def start_spec(alloc: Allocation, agent_id: str) -> dict:
    """What `agent_id` needs to start its container of this allocation (fresh session token)."""
    containers = containers_of(alloc)
    mine = containers.get(agent_id) or {"rank": 0, "slots": list(alloc.slot_indexes)}
    trial = db.session.get(Trial, alloc.trial_id)
    assert trial is not None
    exp = trial.experiment
    token = new_token(allocation_id=alloc.id)
    config = exp.config
    env = {
        "DET_SESSION_TOKEN": token,
        "DET_EXPERIMENT_ID": str(exp.id),
        "DET_TRIAL_ID": str(trial.id),
        "DET_TRIAL_REQUEST_ID": trial.request_id,
        "DET_ALLOCATION_ID": alloc.id,
        "DET_TRIAL_SEED": str(trial.seed),
        "DET_TRIAL_RESTARTS": str(trial.restarts),
        "DET_HPARAMS": json.dumps(trial.hparams),
        "DET_LATEST_CHECKPOINT": trial.latest_checkpoint or "",
        "DET_SLOT_IDS": json.dumps(list(mine["slots"])),
        "DET_CONTAINER_RANK": str(mine["rank"]),
        "DET_NUM_CONTAINERS": str(len(containers)),
        "DET_CONTAINER_ADDRS": json.dumps(container_addrs(containers, agent_id)),
        "DET_EXPERIMENT_CONFIG": json.dumps(config),
    }
    return {
        "allocation_id": alloc.id,
        "trial_id": trial.id,
        "experiment_id": exp.id,
        "entrypoint": command_for(config["entrypoint"]),
        "slot_indexes": list(mine["slots"]),
        "env": env,
        "environment": config.get("environment", {}),
        "bind_mounts": config.get("bind_mounts", []),
        "checkpoint_storage": config.get("checkpoint_storage", {}),
        "model_def_url": f"/api/v1/experiments/{exp.id}/model_def" if exp.model_def else None,
        "model_def_sha256": exp.model_def_sha256,
    }


class Kicker:
    """Runs the scheduling pass in a background thread whenever asked, coalescing requests."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self._event = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="schedule-kicker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        self._event.set()

    def stop(self) -> None:
        self._stop.set()
        self._event.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._event.wait()
            self._event.clear()
            if self._stop.is_set():
                return
            try:
                with self.app.app_context():
                    schedule_pass()
            except Exception:
                log.exception("scheduling pass failed")


def request_schedule() -> None:
    kicker: Kicker | None = current_app.extensions.get("det_kicker")
    if kicker is not None:
        kicker.kick()
