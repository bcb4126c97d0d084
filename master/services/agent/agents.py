"""Agents: registration + heartbeat + work in one poll, level-triggered; and the reaper.

Each poll compares what the agent runs with what the master wants it to run and answers with
the difference (start these, kill those). Lost replies and agent restarts therefore heal on the
next poll.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from flask import current_app
from sqlalchemy import select

from detlab.protocol import (
    Action,
    AllocationReport,
    ExitCause,
    PollReply,
    PollRequest,
    ProtocolError,
    ReportedState,
)
from master.context import master_state, state_lock
from master.db import db, utcnow
from master.errors import BadRequest
from master.models import Agent, Allocation, Slot
from master.notify import agent_key, hub, notify_after_commit
from master.services.agent import heartbeats
from master.services.queue.kicker import request_schedule
from master.services.task.allocations import (
    allocation_generation,
    containers_of,
    live_containers,
    set_container,
)
from master.services.task.launch import start_spec
from master.services.task.tasks import allocation_exited
from master.services.transitions import born, set_agent_state, set_allocation_state
from master.states import (
    LIVE_ALLOCATION,
    AgentState,
    AllocationState,
    ContainerState,
    container_state,
)

log = logging.getLogger("detlab.agents")

MAX_WAIT = 30.0


def parse_poll(body: Any) -> PollRequest:
    try:
        return PollRequest.parse(body)
    except ProtocolError as e:
        raise BadRequest(str(e), path=e.path) from None


# ---- one poll, top to bottom --------------------------------------------------------------------


def handle_poll(agent_id: str, payload: PollRequest, remote_addr: str | None = None) -> PollReply:
    """One poll, top to bottom (the functions below follow in this order):

    1. a known, unchanged agent with nothing to report only beats (no lock, one UPDATE:
       `_heartbeat`); otherwise the agent, its slots and its reports are recorded
       (`_record_poll`: `_sync_agent`, then `_reconcile_reports`);
    2. the reply is what the master wants of it now: start these, kill those, delete those
       checkpoints (`_due_actions`); with nothing to say, the poll waits to be woken until its
       wait is up (`_answer_when_due`).
    """
    cfg = current_app.config["DET"]
    wait = min(payload.wait, MAX_WAIT, cfg.agent_timeout / 2)
    deadline = time.monotonic() + max(wait, 0.0)
    reported = {a.id: a for a in payload.allocations}
    idle = _heartbeat(agent_id, payload)  # True: nothing runs or is wanted on this agent
    if not idle:
        _record_poll(agent_id, payload, reported, remote_addr)
    return _answer_when_due(agent_id, payload, reported, idle, deadline)


# ---- 1a. the common poll: a heartbeat -----------------------------------------------------------


def _heartbeat(agent_id: str, payload: PollRequest) -> bool:
    """The common poll: a known, unchanged agent with nothing to report. One UPDATE, no lock."""
    if payload.allocations or _synced().get(agent_id) != _signature(payload):
        return False
    if _has_allocations(agent_id):
        return False  # reconcile: the agent may have lost what the master thinks it runs
    heartbeats.beat(agent_id, utcnow(), _stats(payload))
    return True


def _signature(payload: PollRequest) -> tuple:
    """What must match the stored agent for a heartbeat to skip the full sync."""
    return (
        payload.resource_pool,
        tuple((s.index, s.type, s.uuid, s.name, s.memory_mb) for s in payload.slots),
        payload.acceptance,
    )


def _synced() -> dict[str, tuple]:
    """agent id -> signature of its last full sync (per app); cleared when it is marked LOST."""
    return master_state().agents.sync


def _stats(payload: PollRequest) -> dict[str, Any]:
    return {str(s.index): s.stats for s in payload.slots if s.stats}


def _has_allocations(agent_id: str) -> bool:
    """Does the master want anything running on this agent? (no lock)

    Answered from a per-agent cache while no allocation has been created or ended since (the
    generation in `allocations.allocation_generation`); otherwise two indexed lookups.
    """
    cache = master_state().agents.busy
    gen = allocation_generation()
    hit = cache.get(agent_id)
    if hit is not None and hit[0] == gen:
        return hit[1]
    busy = _query_has_allocations(agent_id)
    cache[agent_id] = (gen, busy)
    return busy


def _query_has_allocations(agent_id: str) -> bool:
    live = (
        select(Allocation.id)
        .where(Allocation.agent_id == agent_id, Allocation.state.in_(LIVE_ALLOCATION))
        .limit(1)
    )
    if db.session.execute(live).first() is not None:
        return True
    held = (
        select(Slot.id).where(Slot.agent_id == agent_id, Slot.allocation_id.is_not(None)).limit(1)
    )
    return db.session.execute(held).first() is not None


# ---- 1b. otherwise: record the agent, its slots and its reports ---------------------------------


def _record_poll(
    agent_id: str,
    payload: PollRequest,
    reported: dict[str, AllocationReport],
    remote_addr: str | None,
) -> None:
    """Upsert the agent and its slots and apply its reports; schedule if capacity changed."""
    heartbeats.forget(agent_id)
    with state_lock():
        _agent, changed = _sync_agent(agent_id, payload, remote_addr)
        db.session.flush()
        freed = _reconcile_reports(agent_id, reported)
        db.session.commit()
    _synced()[agent_id] = _signature(payload)
    if changed or freed:
        request_schedule()


def _sync_agent(
    agent_id: str, payload: PollRequest, remote_addr: str | None = None
) -> tuple[Agent, bool]:
    """Upsert the agent and its slots; True when capacity changed (run the scheduler)."""
    pool = _known_pool(payload.resource_pool)
    agent, changed = _agent_alive(agent_id, pool)
    if agent.resource_pool != pool:
        agent.resource_pool = pool
        changed = True
    _record_facts(agent, payload, remote_addr)
    changed |= _sync_acceptance(agent, payload)
    changed |= _sync_slots(agent, payload)
    agent.slot_stats = _stats(payload)
    return agent, changed


def _known_pool(pool: str) -> str:
    pools = current_app.config["DET"].pool_names()
    if pool not in pools:
        raise BadRequest(
            f"unknown resource pool {pool!r}; this master has {', '.join(pools)}",
            path="resource_pool",
        )
    return pool


def _agent_alive(agent_id: str, pool: str) -> tuple[Agent, bool]:
    """The agent's row, ACTIVE: born on its first poll, back from LOST on a later one (True: new
    capacity for the scheduler)."""
    agent = db.session.get(Agent, agent_id)
    if agent is None:
        agent = Agent(id=agent_id, resource_pool=pool, state=AgentState.ACTIVE)
        db.session.add(agent)
        born("agent", agent_id, AgentState.ACTIVE, f"registered (pool {pool})")
        log.info("agent %s registered (pool %s)", agent_id, pool)
        return agent, True
    if agent.state != AgentState.ACTIVE:
        log.info("agent %s is back", agent_id)
        set_agent_state(agent, AgentState.ACTIVE, "it polled again")
        return agent, True
    return agent, False


def _record_facts(agent: Agent, payload: PollRequest, remote_addr: str | None) -> None:
    """What the agent says about itself (an empty answer keeps what it said before)."""
    agent.hostname = payload.hostname or agent.hostname
    if remote_addr:
        agent.address = remote_addr[:256]
    agent.runtime = payload.runtime or agent.runtime
    agent.version = payload.version or agent.version
    agent.last_seen = utcnow()


def _sync_acceptance(agent: Agent, payload: PollRequest) -> bool:
    """Whose tasks the agent takes (its isolation mode and Unix uid). True when that changed:
    the queue may move."""
    acc = payload.acceptance
    isolation, uid = (None, None) if acc is None else (acc.mode.value, acc.uid)
    if (agent.isolation, agent.unix_uid) == (isolation, uid):
        return False
    agent.isolation, agent.unix_uid = isolation, uid
    return True


def _sync_slots(agent: Agent, payload: PollRequest) -> bool:
    """The agent's slots as it reports them; a slot it no longer reports goes once it is free.
    True when a slot came or went."""
    changed = False
    reported = {s.index: s for s in payload.slots}
    existing = {s.index: s for s in agent.slots}
    for index, s in reported.items():
        slot = existing.get(index)
        if slot is None:
            slot = Slot(agent_id=agent.id, index=index)
            agent.slots.append(slot)
            changed = True
        slot.type = s.type
        slot.uuid = s.uuid
        slot.name = s.name
        slot.memory_mb = s.memory_mb
    for index, slot in existing.items():
        if index not in reported and slot.allocation_id is None:
            agent.slots.remove(slot)
            changed = True
    return changed


def _reconcile_reports(agent_id: str, reported: dict[str, AllocationReport]) -> bool:
    """Apply what the agent says about its containers, then end the containers it no longer
    has. True if any slots were freed."""
    freed = False
    for alloc_id, rep in reported.items():
        freed |= _apply_report(agent_id, alloc_id, rep)
    return _end_vanished_containers(agent_id, reported) or freed


def _apply_report(agent_id: str, alloc_id: str, rep: AllocationReport) -> bool:
    """One container's report: it started (ASSIGNED -> RUNNING) or exited. True: slots freed."""
    alloc = db.session.get(Allocation, alloc_id)
    if alloc is None or alloc.state == AllocationState.TERMINATED:
        return False
    container = containers_of(alloc).get(agent_id)
    if container is None:
        return False
    now_in = container_state(container)
    if rep.state == ReportedState.EXITED:
        if now_in != ContainerState.EXITED:
            return _container_exited(alloc, agent_id, rep.exit_code, rep.error, rep.cause)
    elif now_in == ContainerState.ASSIGNED and rep.state == ReportedState.RUNNING:
        set_container(alloc, agent_id, started_at=utcnow().isoformat())
        set_allocation_state(alloc, AllocationState.RUNNING, f"agent {agent_id} started it")
    if rep.state == ReportedState.RUNNING and rep.proxy_port != container.get("proxy_port"):
        # Where the master's proxy reaches the task (master/proxy/access.py).
        set_container(alloc, agent_id, proxy_port=rep.proxy_port)
    return False


def _end_vanished_containers(agent_id: str, reported: dict[str, AllocationReport]) -> bool:
    """Containers the agent no longer has: it restarted, and with it their processes died.
    True: slots freed."""
    freed = False
    settle = (utcnow() - timedelta(seconds=10)).isoformat()  # a poll built before the start
    for alloc in _agent_allocations(agent_id):
        container = containers_of(alloc).get(agent_id, {})
        started = container.get("started_at")
        if (
            alloc.id not in reported
            and container_state(container) == ContainerState.RUNNING
            and started is not None
            and started < settle
        ):
            freed |= _container_exited(
                alloc,
                agent_id,
                None,
                f"agent {agent_id} no longer runs this allocation",
                ExitCause.CONTAINER_GONE,
            )
    return freed


def _container_exited(
    alloc: Allocation,
    agent_id: str,
    code: int | None,
    err: str | None,
    cause: ExitCause | None = None,
) -> bool:
    """Record one container's exit; the allocation ends when all of its containers have.

    One failing container of a multi-agent trial ends the whole trial: the others are killed.
    Returns True when the allocation ended (slots freed).
    """
    set_container(
        alloc, agent_id, exited=True, exit_code=code, error=err, cause=cause and cause.value
    )
    failed = code != 0 or bool(err)
    live = live_containers(alloc)
    if live and failed:
        _kill_the_others(alloc, agent_id, live, code, err)
        return False
    if live:
        return False
    _allocation_done(alloc)
    return True


# The Kubernetes RM (master/rm/k8s/apply.py) ends a pod's container the same way.
container_exited = _container_exited


def _kill_the_others(
    alloc: Allocation, agent_id: str, live: list[str], code: int | None, err: str | None
) -> None:
    """A failed container takes its gang with it: the containers still running are killed."""
    for other in live:
        set_container(alloc, other, kill=True)
    alloc.exit_reason = alloc.exit_reason or (
        f"container on agent {agent_id} exited with code {code}" + (f": {err}" if err else "")
    )
    notify_after_commit(*(agent_key(other) for other in live))


def _allocation_done(alloc: Allocation) -> None:
    """Every container is done: the first failure (by rank) decides the outcome."""
    worst = sorted(
        (c for c in containers_of(alloc).values() if c.get("exit_code") != 0 or c.get("error")),
        key=lambda c: c.get("rank", 0),
    )
    if worst:
        allocation_exited(
            alloc,
            worst[0].get("exit_code"),
            worst[0].get("error") or alloc.exit_reason,
            ExitCause.parse(worst[0].get("cause")),
        )
    else:
        allocation_exited(alloc, 0, None)


# ---- 2. the reply: what the master wants of the agent now ---------------------------------------


def _answer_when_due(
    agent_id: str,
    payload: PollRequest,
    reported: dict[str, AllocationReport],
    idle: bool,
    deadline: float,
) -> PollReply:
    while True:
        seen = hub().version(agent_key(agent_id))
        actions = _due_actions(agent_id, reported, idle)
        remaining = deadline - time.monotonic()
        if actions or remaining <= 0:
            # Seen now too, not only when the poll began: `agent_timeout` then counts from the
            # agent's last contact, so a long poll neither hides nor hastens its loss.
            heartbeats.beat(agent_id, utcnow(), _stats(payload))
            return PollReply(tuple(actions))
        db.session.close()
        if hub().wait(agent_key(agent_id), seen, remaining):
            idle = False  # woken: there may be work now


def _due_actions(agent_id: str, reported: dict[str, AllocationReport], idle: bool) -> list[Action]:
    """What the agent should do now: its allocations' starts and kills, and checkpoint
    deletions only agents can do."""
    from master.ckpt.gc import agent_actions  # imported late, as before the split

    actions: list[Action] = []
    if not idle and (reported or _has_allocations(agent_id)):
        with state_lock():
            actions = _actions(agent_id, reported)
            db.session.commit()
    return actions + agent_actions()


def _actions(agent_id: str, reported: dict[str, AllocationReport]) -> list[Action]:
    """Kills for what it runs and should not, starts for what it should run and does not."""
    wanted = {a.id: a for a in _agent_allocations(agent_id)}
    return _kills(agent_id, reported, wanted) + _starts(agent_id, reported, wanted)


def _agent_allocations(agent_id: str) -> list[Allocation]:
    """Live allocations with a container on this agent (slots here, or its zero-slot chief)."""
    via_slots = select(Slot.allocation_id).where(
        Slot.agent_id == agent_id, Slot.allocation_id.is_not(None)
    )
    return list(
        db.session.execute(
            select(Allocation).where(
                Allocation.state.in_(LIVE_ALLOCATION),
                (Allocation.agent_id == agent_id) | Allocation.id.in_(via_slots),
            )
        ).scalars()
    )


def _kills(
    agent_id: str, reported: dict[str, AllocationReport], wanted: dict[str, Allocation]
) -> list[Action]:
    """A running container the master no longer wants, or was asked to kill."""
    kills = []
    for alloc_id, rep in reported.items():
        if rep.state == ReportedState.EXITED:
            continue
        alloc = wanted.get(alloc_id)
        container = containers_of(alloc).get(agent_id, {}) if alloc else {}
        if alloc is None or alloc.kill_requested or container.get("kill"):
            kills.append(Action.kill(alloc_id))
    return kills


def _starts(
    agent_id: str, reported: dict[str, AllocationReport], wanted: dict[str, Allocation]
) -> list[Action]:
    """A container assigned here and not started yet; one killed before it started ends now."""
    starts = []
    for alloc_id, alloc in wanted.items():
        container = containers_of(alloc).get(agent_id, {})
        if alloc_id in reported or container_state(container) != ContainerState.ASSIGNED:
            continue
        if alloc.kill_requested or container.get("kill"):
            if alloc.state == AllocationState.ASSIGNED:
                _container_exited(
                    alloc,
                    agent_id,
                    None,
                    ExitCause.KILLED_BEFORE_START.message,
                    ExitCause.KILLED_BEFORE_START,
                )
            continue
        starts.append(Action.start(start_spec(alloc, agent_id)))
    return starts


# ---- the reaper ---------------------------------------------------------------------------------


def reap_lost_agents() -> None:
    """Agents that stopped polling are LOST; their allocations fail and restart elsewhere."""
    cfg = current_app.config["DET"]
    heartbeats.flush()  # judge on the freshest heartbeats
    cutoff = utcnow() - timedelta(seconds=cfg.agent_timeout)
    freed = False
    with state_lock():
        lost = list(
            db.session.execute(
                select(Agent).where(Agent.state == AgentState.ACTIVE, Agent.last_seen < cutoff)
            ).scalars()
        )
        for agent in lost:
            set_agent_state(agent, AgentState.LOST, f"no poll for {cfg.agent_timeout:g}s")
            _synced().pop(agent.id, None)
            heartbeats.forget(agent.id)
            log.warning("agent %s lost (no poll for %.0fs)", agent.id, cfg.agent_timeout)
            for alloc in _agent_allocations(agent.id):
                # The whole trial fails: its containers on other agents are killed.
                allocation_exited(alloc, None, f"agent {agent.id} was lost", ExitCause.AGENT_LOST)
                freed = True
        db.session.commit()
    if freed:
        request_schedule()
