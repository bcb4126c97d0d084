"""Checkpoint garbage collection: plan with the pure keep rule, mark, delete, retry.

`collect(exp)` marks what the policy no longer keeps as DELETING; `run_deletions()` (the
APScheduler job) removes their files and records DELETED, or DELETE_FAILED with the error and a
next attempt after an exponential backoff. Storage the master cannot reach is handed to an agent
(`claim_for_agent`/`agent_result`). Registered checkpoints and the checkpoint each trial would
resume from are never planned for deletion.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import timedelta
from typing import Any

from flask import current_app
from sqlalchemy import func, select

from detlab.protocol import Action
from master.ckpt import candidates as ckcandidates
from master.ckpt import replan
from master.ckpt import storage as ckstorage
from master.ckpt.policy import Candidate, Plan, Policy, plan
from master.ckpt.states import CheckpointState, state_of, transition  # noqa: F401 - re-exported
from master.context import master_state, state_lock
from master.db import db, utcnow
from master.errors import BadRequest, Conflict
from master.models import Checkpoint, Experiment, ModelVersion
from master.states import AgentState

log = logging.getLogger("detlab.ckpt.gc")

BACKOFF_BASE_S = 2.0
BACKOFF_MAX_S = 600.0
BATCH = 200


def run_lock() -> threading.Lock:
    """One GC run (or experiment delete) at a time in this master."""
    return master_state().checkpoints.gc_lock


def _agent_work() -> threading.Event:
    """Set by the GC job when deletions wait for an agent: polls then claim them (cheap
    otherwise). Per master (MasterState)."""
    return master_state().checkpoints.agent_work


def _wake_agents() -> None:
    if _agent_work().is_set():
        return
    from master.models import Agent
    from master.notify import agent_key, hub

    _agent_work().set()
    ids = db.session.execute(select(Agent.id).where(Agent.state == AgentState.ACTIVE)).scalars()
    hub().notify(*[agent_key(i) for i in ids])


def master_reaches(storage: dict[str, Any]) -> bool:
    if current_app.config["DET"].checkpoint_gc_via_agents:
        return False
    return ckstorage.master_can_reach(storage)


def backoff(attempts: int) -> float:
    """Seconds before retry number `attempts` (1, 2, ...): 2, 4, 8, ... capped at 10 min."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * (2 ** max(0, attempts - 1)))


def registered_uuids(uuids: list[str] | None = None) -> set[str]:
    q = select(ModelVersion.checkpoint_uuid)
    if uuids is not None:
        q = q.where(ModelVersion.checkpoint_uuid.in_(uuids))
    return set(db.session.execute(q).scalars())


def policy_of(exp: Experiment) -> Policy:
    s = exp.conf.checkpoint_storage
    return Policy(s.save_experiment_best, s.save_trial_best, s.save_trial_latest)


def candidates(exp: Experiment) -> list[Candidate]:
    """The experiment's live checkpoints with their validation metric and protection."""
    return ckcandidates.candidates(exp.id, exp.conf.searcher.metric)


def plan_experiment(exp: Experiment, policy: Policy | None = None) -> Plan:
    return plan(candidates(exp), policy or policy_of(exp), exp.conf.searcher.smaller_is_better)


def mark_for_deletion(ckpts: list[Checkpoint], reason: str) -> int:
    """ACTIVE/DELETE_FAILED -> DELETING (due now); registered ones are refused. Caller commits."""
    registered = registered_uuids([c.uuid for c in ckpts])
    marked = 0
    for c in ckpts:
        if c.uuid in registered:
            raise Conflict(f"checkpoint {c.uuid} is registered in the model registry")
        if state_of(c) in (CheckpointState.DELETING, CheckpointState.DELETED):
            continue
        transition(c, CheckpointState.DELETING, reason)
        c.next_delete_at = utcnow()
        marked += 1
    return marked


def collect(exp: Experiment) -> Plan:
    """Apply the experiment's policy now: mark what it does not keep for deletion."""
    p = plan_experiment(exp)
    if p.delete:
        doomed = list(
            db.session.execute(select(Checkpoint).where(Checkpoint.uuid.in_(p.delete))).scalars()
        )
        mark_for_deletion(doomed, f"not kept by the GC policy {policy_of(exp).to_json()}")
        db.session.commit()
    return p


def set_policy(exp: Experiment, changes: dict[str, Any]) -> Plan:
    """Change the experiment's save_* numbers and collect with the new policy."""
    for key, value in changes.items():
        if key not in Policy().to_json():
            raise BadRequest(f"unknown GC policy key {key!r}", path=key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadRequest(f"{key} must be an integer >= 0", path=key)
    storage = dataclasses.replace(exp.conf.checkpoint_storage, **changes)
    exp.conf = exp.conf.replace(checkpoint_storage=storage)
    db.session.commit()
    return collect(exp)


def collect_all() -> None:
    """The periodic pass: every experiment whose live checkpoints changed since the last one,
    or whose validations or registered versions did (`master/ckpt/replan.py`); a policy change
    collects at once. (Planning every experiment every pass would not scale.)"""
    seen = master_state().checkpoints.gc_seen
    rows = db.session.execute(
        select(Checkpoint.experiment_id, func.count(), func.max(Checkpoint.reported_at))
        .where(Checkpoint.state == CheckpointState.ACTIVE)
        .group_by(Checkpoint.experiment_id)
    ).all()
    for exp_id, count, newest in rows:
        gen = replan.generation(exp_id)  # before planning: a change during it plans again
        if seen.get(exp_id) == (count, newest, gen):
            continue
        exp = db.session.get(Experiment, exp_id)
        if exp is not None:
            plan_ = collect(exp)
            seen[exp_id] = (count - len(plan_.delete), newest, gen)


def _storage_config(c: Checkpoint) -> dict[str, Any] | None:
    exp = db.session.get(Experiment, c.experiment_id)
    if exp is None:
        return None
    return exp.conf.checkpoint_storage.to_json()


def delete_files(storage: dict[str, Any], uuid: str) -> None:
    """Remove every file of the checkpoint; verified gone (a missing file counts as deleted)."""
    backend = ckstorage.backend(storage)
    backend.delete(uuid)
    left = backend.list_files(uuid)
    if left:
        raise OSError(f"{len(left)} file(s) still in storage after delete, e.g. {next(iter(left))}")


def record_result(c: Checkpoint, error: str | None, by: str = "the master") -> None:
    """DELETING -> DELETED, or -> DELETE_FAILED with the error and the next try. Caller commits."""
    if error is None:
        transition(c, CheckpointState.DELETED, f"files deleted by {by}")
        c.next_delete_at = None
        return
    c.delete_attempts = (c.delete_attempts or 0) + 1
    wait = backoff(c.delete_attempts)
    transition(c, CheckpointState.DELETE_FAILED, f"attempt {c.delete_attempts} by {by}: {error}")
    c.next_delete_at = utcnow() + timedelta(seconds=wait)
    log.warning("deleting checkpoint %s failed (retry in %.0fs): %s", c.uuid, wait, error)


def due(limit: int = BATCH, agent: bool = False) -> list[Checkpoint]:
    now = utcnow()
    rows = db.session.execute(
        select(Checkpoint)
        .where(
            Checkpoint.state.in_((CheckpointState.DELETING, CheckpointState.DELETE_FAILED)),
            (Checkpoint.next_delete_at.is_(None)) | (Checkpoint.next_delete_at <= now),
        )
        .order_by(Checkpoint.next_delete_at)
        .limit(limit)
    ).scalars()
    return list(rows)


def run_deletions(limit: int = BATCH) -> int:
    """Delete due checkpoints the master can reach; returns how many were attempted."""
    if not run_lock().acquire(blocking=False):
        return 0
    try:
        done = 0
        for c in due(limit):
            storage = _storage_config(c)
            if storage is None:
                continue
            if not master_reaches(storage):
                _wake_agents()  # an agent takes it (agent_actions)
                continue
            if state_of(c) == CheckpointState.DELETE_FAILED:
                transition(c, CheckpointState.DELETING, f"retry {c.delete_attempts + 1}")
            try:
                delete_files(storage, c.uuid)
                error = None
            except Exception as e:  # noqa: BLE001 - any storage error is recorded and retried
                error = f"{type(e).__name__}: {e}"
            record_result(c, error)
            db.session.commit()
            done += 1
        return done
    finally:
        run_lock().release()


def gc_tick() -> None:
    """The APScheduler job: apply every experiment's policy, then delete what is due."""
    collect_all()
    run_deletions()


def claim_for_agent(limit: int = 20) -> list[Action]:
    """Due deletions on storage only agents reach, as poll actions (with their storage)."""
    out = []
    for c in due(limit):
        storage = _storage_config(c)
        if storage is None or master_reaches(storage):
            continue
        if state_of(c) == CheckpointState.DELETE_FAILED:
            transition(c, CheckpointState.DELETING, f"retry {c.delete_attempts + 1} on an agent")
        # Not handed out again until the lease runs out (a lost agent's work is retried).
        c.next_delete_at = utcnow() + timedelta(seconds=60)
        out.append(Action.delete_checkpoint(c.uuid, storage))
    if out:
        db.session.commit()
    return out


def agent_actions() -> list[Action]:
    """For an agent's poll: due deletions only agents can do (none without a DB query when the
    GC job found no such work)."""
    if not _agent_work().is_set():
        return []
    _agent_work().clear()
    with state_lock():
        actions = claim_for_agent()
    if actions:
        _agent_work().set()  # there may be more for the next poll
    return actions


def agent_result(uuid: str, error: str | None, agent_id: str) -> Checkpoint:
    c = db.session.get(Checkpoint, uuid)
    if c is None:
        raise BadRequest(f"checkpoint {uuid} not found", path="uuid")
    if state_of(c) != CheckpointState.DELETING:
        raise Conflict(f"checkpoint {uuid} is {c.state}, not DELETING")
    record_result(c, error, by=f"agent {agent_id}")
    db.session.commit()
    return c


def experiment_usage(exp_id: int) -> dict[str, Any]:
    """Checkpoint count and bytes of an experiment, by state."""
    rows = db.session.execute(
        select(Checkpoint.state, Checkpoint.size).where(Checkpoint.experiment_id == exp_id)
    ).all()
    by_state: dict[str, dict[str, int]] = {}
    for state, size in rows:
        s = by_state.setdefault(CheckpointState(state).value, {"count": 0, "bytes": 0})
        s["count"] += 1
        s["bytes"] += int(size or 0)
    live = by_state.get("ACTIVE", {"count": 0, "bytes": 0})
    return {"count": live["count"], "bytes": live["bytes"], "by_state": by_state}
