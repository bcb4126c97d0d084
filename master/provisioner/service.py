"""One provisioning pass per provider pool: the cloud and the DB in, the pure decision out,
applied. Runs on an APScheduler job (master/jobs.py), one pass at a time.

1. List this master's instances of the pool in the cloud (the source of truth, by tag/label).
2. Reconcile the `instances` rows with it: a launch cut short by a crash is found by its launch
   tag (no duplicate), instances gone from the cloud end, tagged instances with no row (orphans)
   are terminated.
3. Decide (master/provisioner/decision.py) and apply: terminations first (the agent's slots are
   disabled under the state lock, so nothing is placed on it while it goes), then launches, each
   row written before the cloud call. A failed launch backs off (doubling, capped).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast, overload

from flask import current_app
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from master.auth import token_cache
from master.context import master_state, state_lock
from master.db import db, utcnow
from master.models import Agent, Allocation, Instance, ProvisionerPool, Slot
from master.provisioner.config import ProviderConfig
from master.provisioner.decision import InstanceView, PoolLimits, ScaleDecision, decide
from master.provisioner.provider import (
    AWS_AGENT_ID_CMD,
    AWS_INTERRUPTION_URL,
    GCP_INTERRUPTION_URL,
    CloudInstance,
    LaunchError,
    LaunchRequest,
    Provider,
    startup_script,
)
from master.provisioner.states import LIVE, InstanceState, transition
from master.provisioner.tokens import mint
from master.scheduler import AgentView
from master.services.agent import heartbeats
from master.services.agent.agent_credentials import forget as forget_credential
from master.services.queue.kicker import request_schedule
from master.services.queue.scheduling import pending_requests
from master.services.transitions import born
from master.states import LIVE_ALLOCATION, AgentState

log = logging.getLogger("detlab.provisioner")

BACKOFF_CAP = 600.0
# A LAUNCHING row this old with no instance in the cloud was cut short before the cloud call.
LAUNCH_SETTLE = timedelta(seconds=60)

S = InstanceState


def make_provider(pc: ProviderConfig, pool: str, tag_value: str) -> Provider:
    if pc.type == "aws":
        from master.provisioner.aws import AwsProvider

        return AwsProvider(pc, pool, tag_value)
    from master.provisioner.gcp import GcpProvider

    return GcpProvider(pc, pool, tag_value)


def _ts(dt: datetime | None) -> float | None:
    if dt is None:
        return None
    return dt.timestamp() if dt.tzinfo else dt.replace(tzinfo=utcnow().tzinfo).timestamp()


@overload
def _aware(dt: datetime) -> datetime: ...
@overload
def _aware(dt: None) -> None: ...
def _aware(dt: datetime | None) -> datetime | None:
    return dt if dt is None or dt.tzinfo else dt.replace(tzinfo=utcnow().tzinfo)


def provision_pass(now: Callable[[], datetime] = utcnow) -> None:
    """Every provider pool, one after another (an app context is required)."""
    for pool in current_app.config["DET"].resource_pools:
        if pool.provider is None:
            continue
        try:
            pool_pass(pool.name, pool.provider, now)
        except Exception as e:
            db.session.rollback()
            log.exception("provisioning pool %s failed", pool.name)
            _pool_error(pool.name, f"provisioning failed: {e}", backoff=False)


def pool_row(name: str) -> ProvisionerPool:
    row = db.session.get(ProvisionerPool, name)
    if row is None:
        row = ProvisionerPool(name=name, cluster_id=uuid.uuid4().hex, launch_failures=0)
        db.session.add(row)
        db.session.commit()
    return row


def provider_for(name: str, pc: ProviderConfig) -> Provider:
    cache: dict[str, Provider] = master_state().provisioner.providers
    if name not in cache:
        row = pool_row(name)
        tag = (pc.tag_value if pc.type == "aws" else pc.label_value) or row.cluster_id
        cache[name] = make_provider(pc, name, tag)
    return cache[name]


def pool_pass(name: str, pc: ProviderConfig, now: Callable[[], datetime] = utcnow) -> None:
    provider = provider_for(name, pc)
    cloud = provider.list_instances()  # I/O, outside the state lock
    heartbeats.flush()  # judge agents on their freshest polls
    with state_lock():
        orphans = reconcile(name, cloud, now(), pc.type)
        decision = _decide(name, pc, now())
        stopping = _begin_terminations(name, decision)
        db.session.commit()
    if orphans or stopping:
        _terminate(provider, orphans + stopping)
    if decision.launch:
        _launch(name, pc, provider, decision.launch)


GONE = "gone from the cloud"


def reconcile(pool: str, cloud: list[CloudInstance], now: datetime, kind: str = "?") -> list[str]:
    """Bring the rows in line with the cloud. Returns orphan cloud ids to terminate."""
    by_launch = {c.launch_id: c for c in cloud if c.launch_id}
    by_cloud = {c.cloud_id: c for c in cloud}
    started = master_state().provisioner.started or now
    rows = list(
        db.session.execute(
            select(Instance).where(
                Instance.pool == pool, Instance.state.in_([*LIVE, S.TERMINATING.value])
            )
        ).scalars()
    )
    known: set[str] = set()
    # Longer than a healthy agent's long poll (at most agent_timeout / 2), shorter than the
    # lost-agent reaper's agent_timeout.
    silent = timedelta(seconds=0.75 * current_app.config["DET"].agent_timeout)
    agents = {
        a.id: a
        for a in db.session.execute(
            select(Agent).where(Agent.id.in_([r.cloud_id for r in rows if r.cloud_id]))
        ).scalars()
    }
    busy = _busy_agents([r.cloud_id for r in rows if r.cloud_id])
    for row in rows:
        known.add(row.id)
        if row.state == S.LAUNCHING:
            _reconcile_launching(row, by_launch.get(row.id), started, now)
            continue
        if row.cloud_id:
            known.add(row.cloud_id)
        c = by_cloud.get(row.cloud_id or "")
        if c is None and row.state == S.STARTING and now - _aware(row.launched_at) < LAUNCH_SETTLE:
            continue  # just launched: the cloud's listing may not show it yet
        if (
            c is None
            or c.state in ("terminated", "stopped")
            or (c.state == "stopping" and row.interrupted_at is not None)
        ):
            _ended(row, now, "stopped by the cloud" if c and c.state == "stopped" else GONE)
            continue
        if row.state == S.TERMINATING:
            continue
        _follow_agent(row, agents.get(row.cloud_id or ""), row.cloud_id in busy, now, silent)
    return _terminate_orphans(pool, cloud, known, now, kind)


def _reconcile_launching(
    row: Instance, found: CloudInstance | None, started: datetime, now: datetime
) -> None:
    """A launch in flight: found in the cloud by its tag, or failed if a master restart
    interrupted it."""
    if found is not None:
        row.cloud_id = found.cloud_id
        transition(row, S.STARTING, "found in the cloud by its launch tag")
    elif _aware(row.launched_at) < started and now - _aware(row.launched_at) > LAUNCH_SETTLE:
        transition(row, S.FAILED, "launch interrupted by a master restart; no instance")
        _revoke(row)


def _follow_agent(
    row: Instance, agent: Agent | None, busy: bool, now: datetime, silent: timedelta
) -> None:
    """A live instance follows its agent: RUNNING while the agent is connected (else STARTING),
    marked busy while it runs something, and its trials requeued once an interrupted instance's
    agent goes silent."""
    if (
        row.interrupted_at is not None
        and agent is not None
        and _aware(agent.last_seen) < now - silent
    ):
        _requeue_interrupted(row)  # its agent went quiet: the instance is going
    if agent is not None and agent.state == AgentState.ACTIVE:
        if row.state == S.STARTING:
            transition(row, S.RUNNING, "its agent connected")
            row.connected_at = now
        if busy:
            row.last_busy_at = now
    elif row.state == S.RUNNING and agent is not None and agent.state != AgentState.ACTIVE:
        transition(row, S.STARTING, f"its agent is {agent.state}")


def _terminate_orphans(
    pool: str, cloud: list[CloudInstance], known: set[str], now: datetime, kind: str
) -> list[str]:
    """Cloud instances tagged as ours that no row knows: recorded as TERMINATING; returns
    their cloud ids to terminate, with those of stopped instances of ours (a preempted GCE VM
    stays, stopped, and bills for its disks), deleted whether or not a row still names them."""
    orphans = [c.cloud_id for c in cloud if c.state == "stopped"]
    for c in cloud:
        if c.launch_id in known or c.cloud_id in known or c.state in ("terminated", "stopped"):
            continue
        # Tagged as ours, yet no row launched it: never leave it running (and billing).
        row = Instance(
            id=c.launch_id or uuid.uuid4().hex,
            pool=pool,
            provider=kind,
            cloud_id=c.cloud_id,
            state=S.TERMINATING.value,
            state_reason="orphan: tagged for this master and pool but not in its records",
            instance_type=c.instance_type,
            slots=0,
            spot=c.spot,
            launched_at=now,
        )
        if db.session.get(Instance, row.id) is None:
            db.session.add(row)
            born("instance", row.id, S.TERMINATING, "an orphan found in the cloud")
        orphans.append(c.cloud_id)
        log.warning("pool %s: terminating orphan instance %s", pool, c.cloud_id)
    return orphans


def _busy_agents(agent_ids: list[str]) -> set[str]:
    if not agent_ids:
        return set()
    held = db.session.execute(
        select(Slot.agent_id).where(Slot.agent_id.in_(agent_ids), Slot.allocation_id.is_not(None))
    ).scalars()
    live = db.session.execute(
        select(Allocation.agent_id, Allocation.containers).where(
            Allocation.state.in_(LIVE_ALLOCATION)
        )
    ).all()
    out = set(held)
    wanted = set(agent_ids)
    for agent_id, containers in cast("list[tuple[str, dict[str, Any] | None]]", live):
        for a in {agent_id, *(containers or {})}:
            if a in wanted:
                out.add(a)
    return out


def _ended(row: Instance, now: datetime, why: str) -> None:
    """The instance is gone: its token dies with it; an interrupted spot instance's trials
    queue again without a failure counted."""
    if row.state == S.TERMINATING:  # keep why it was terminated, for the history
        why = f"terminated ({row.state_reason})"
    transition(row, S.TERMINATED, why)
    row.terminated_at = now
    _revoke(row)
    _requeue_interrupted(row)


def _requeue_interrupted(row: Instance) -> None:
    """An interrupted instance's trials that it can no longer report on: queued again without
    a failure counted (the lost-agent reaper would count one)."""
    if row.interrupted_at is None or not row.cloud_id:
        return
    from detlab.protocol import ExitCause
    from master.services.task.tasks import allocation_exited

    allocs = _allocations_on(row.cloud_id)
    why = f"instance {row.cloud_id} was interrupted (spot/preemptible)"
    for alloc in allocs:
        allocation_exited(alloc, None, why, ExitCause.INSTANCE_INTERRUPTED)
    if allocs:
        request_schedule()


def _revoke(row: Instance) -> None:
    """The instance is going or gone: neither its join token nor the per-agent credential its
    agent exchanged it for (master/services/agent/agent_credentials.py) acts as its agent any more.
    Otherwise a credential copied off the instance (its disk, a snapshot, a trial that read it
    on an unisolated agent) would keep polling as an agent the master still knows."""
    if row.join_token_hash:
        token_cache().evict(row.join_token_hash)
    row.join_token_hash = None
    if row.cloud_id:
        forget_credential(row.cloud_id)


def _allocations_on(agent_id: str) -> list[Allocation]:
    allocs = db.session.execute(
        select(Allocation).where(Allocation.state.in_(LIVE_ALLOCATION))
    ).scalars()
    return [a for a in allocs if a.agent_id == agent_id or agent_id in (a.containers or {})]


def limits_of(pc: ProviderConfig) -> PoolLimits:
    return PoolLimits(
        min_instances=pc.min_instances,
        max_instances=pc.max_instances,
        instance_slots=pc.instance_slots,
        max_idle=pc.max_idle_agent_period,
        max_starting=pc.max_agent_starting_period,
    )


def _decide(pool: str, pc: ProviderConfig, now: datetime) -> ScaleDecision:
    rows = list(
        db.session.execute(
            select(Instance).where(Instance.pool == pool, Instance.state.in_(list(LIVE)))
        ).scalars()
    )
    ids = {r.cloud_id for r in rows if r.cloud_id}
    agents = list(
        db.session.execute(
            select(Agent)
            .where(Agent.resource_pool == pool, Agent.state == AgentState.ACTIVE)
            .options(selectinload(Agent.slots))
        ).scalars()
    )
    free = {
        a.id: tuple(s.index for s in a.slots if s.enabled and s.allocation_id is None)
        for a in agents
    }
    busy = _busy_agents(list(ids))
    seen = dict(
        db.session.execute(select(Agent.id, Agent.last_seen).where(Agent.id.in_(ids))).all()
    )
    views = []
    for r in rows:
        connected = r.state == S.RUNNING and r.cloud_id in free
        idle_since = None
        if connected and r.cloud_id not in busy:
            idle_since = _ts(r.last_busy_at or r.connected_at)
        # An agent that went away counts as starting again from when it was last seen.
        since = r.launched_at if r.connected_at is None else seen.get(r.cloud_id or "")
        views.append(
            InstanceView(
                id=r.id,
                launched_at=_ts(since or r.launched_at) or 0.0,
                connected=connected,
                free=free.get(r.cloud_id or "", ()),
                busy=r.cloud_id in busy,
                idle_since=idle_since,
            )
        )
    static = [
        AgentView(id=a.id, pool=pool, free=free[a.id], total=len(a.slots))
        for a in agents
        if a.id not in ids
    ]
    requests = pending_requests(pool)
    prow = pool_row(pool)
    allowed = prow.backoff_until is None or _aware(prow.backoff_until) <= now
    return decide(
        limits_of(pc),
        views,
        requests,
        now.timestamp(),
        static_agents=static,
        launch_allowed=allowed,
    )


def _begin_terminations(pool: str, decision: ScaleDecision) -> list[str]:
    """Mark the decided instances TERMINATING (token revoked, slots disabled) if still idle."""
    out = []
    for inst_id, why in decision.terminate:
        row = db.session.get(Instance, inst_id)
        if row is None or row.state not in LIVE:
            continue
        if row.cloud_id and row.cloud_id in _busy_agents([row.cloud_id]):
            continue  # work landed on it since the decision: never terminate a busy instance
        transition(row, S.TERMINATING, why)
        _revoke(row)
        if row.cloud_id:
            db.session.execute(
                Slot.__table__.update().where(Slot.agent_id == row.cloud_id).values(enabled=False)
            )
            out.append(row.cloud_id)
        log.info("pool %s: terminating instance %s (%s)", pool, row.cloud_id or row.id, why)
    return out


def _terminate(provider: Provider, cloud_ids: list[str]) -> None:
    try:
        provider.terminate(cloud_ids)
    except Exception as e:  # retried: the rows stay TERMINATING until the cloud says gone
        log.warning("terminating %s failed (retried next pass): %s", cloud_ids, e)
        for row in db.session.execute(
            select(Instance).where(Instance.cloud_id.in_(cloud_ids))
        ).scalars():
            row.last_error = f"terminate failed: {e}"
        db.session.commit()


def _launch(pool: str, pc: ProviderConfig, provider: Provider, count: int) -> None:
    cfg = current_app.config["DET"]
    master_url = pc.master_url or f"http://{cfg.host}:{cfg.port}"
    for _ in range(count):
        launch_id = uuid.uuid4().hex
        token, token_hash = mint()
        spot = pc.spot if pc.type == "aws" else pc.gcp_instance_type.preemptible
        name = f"{pc.name_prefix}{launch_id[:12]}" if pc.type == "gcp" else f"{pc.instance_name}"
        row: Instance | None = Instance(
            id=launch_id,
            pool=pool,
            provider=pc.type,
            state=S.LAUNCHING.value,
            state_reason="launch requested",
            instance_type=pc.instance_type_name,
            slots=pc.instance_slots,
            spot=spot,
            launched_at=utcnow(),
            join_token_hash=token_hash,
        )
        db.session.add(row)
        born("instance", launch_id, S.LAUNCHING, f"launch requested for pool {pool}")
        db.session.commit()  # before the cloud call: a restarted master finds it by its tag
        script = startup_script(
            user_script=pc.startup_script,
            master_url=master_url,
            pool=pool,
            join_token=token,
            agent_id_cmd=AWS_AGENT_ID_CMD if pc.type == "aws" else f"echo {name}",
            interruption_url=AWS_INTERRUPTION_URL if pc.type == "aws" else GCP_INTERRUPTION_URL,
        )
        started = time.monotonic()
        try:
            inst = provider.launch(
                LaunchRequest(launch_id=launch_id, name=name, user_data=script, spot=spot)
            )
        except LaunchError as e:
            with state_lock():
                row = db.session.get(Instance, launch_id)
                assert row is not None
                transition(row, S.FAILED, "launch failed")
                row.last_error = str(e)
                _revoke(row)
                db.session.commit()
            _pool_error(pool, f"launch failed: {e}", backoff=True, base=pc.launch_error_backoff)
            log.warning("pool %s: launch failed: %s", pool, e)
            return
        with state_lock():
            row = db.session.get(Instance, launch_id)
            assert row is not None
            row.cloud_id = inst.cloud_id
            row.spot = inst.spot
            if row.state == S.LAUNCHING:
                transition(row, S.STARTING, "launched")
            prow = pool_row(pool)
            prow.launch_failures = 0
            prow.backoff_until = None
            db.session.commit()
        log.info(
            "pool %s: launched %s (%s, %.2fs)",
            pool,
            inst.cloud_id,
            pc.instance_type_name,
            time.monotonic() - started,
        )


def _pool_error(pool: str, message: str, *, backoff: bool, base: float = 30.0) -> None:
    try:
        row = pool_row(pool)
        row.last_error = message
        row.last_error_at = utcnow()
        if backoff:
            row.launch_failures = (row.launch_failures or 0) + 1
            delay = min(BACKOFF_CAP, base * 2 ** (row.launch_failures - 1))
            row.backoff_until = utcnow() + timedelta(seconds=delay)
        db.session.commit()
    except Exception:
        db.session.rollback()
        log.exception("cannot record the error of pool %s", pool)
