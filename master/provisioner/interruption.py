"""A spot/preemptible instance is about to go: its trials checkpoint, stop and queue again
without a failure counted; nothing new is placed on it."""

from __future__ import annotations

import logging

from sqlalchemy import select

from master.context import state_lock
from master.db import db, utcnow
from master.models import Allocation, Instance, Slot
from master.notify import hub, preempt_key
from master.services.queue.kicker import request_schedule
from master.services.trial.logs import write_master_line
from master.states import LIVE_ALLOCATION

log = logging.getLogger("detlab.provisioner")


def interrupted(agent_id: str) -> dict:
    """Mark the instance interrupted, disable its slots, and preempt what it runs."""
    preempted = []
    with state_lock():
        row = db.session.execute(
            select(Instance).where(Instance.cloud_id == agent_id)
        ).scalar_one_or_none()
        if row is not None and row.interrupted_at is None:
            row.interrupted_at = utcnow()
            row.state_reason = "spot/preemptible interruption notice"
        db.session.execute(
            Slot.__table__.update().where(Slot.agent_id == agent_id).values(enabled=False)
        )
        allocs = db.session.execute(
            select(Allocation).where(Allocation.state.in_(LIVE_ALLOCATION))
        ).scalars()
        for alloc in allocs:
            if alloc.agent_id != agent_id and agent_id not in (alloc.containers or {}):
                continue
            if not alloc.preempt_requested:
                alloc.preempt_requested = True
                alloc.preempt_requested_at = utcnow()
                write_master_line(
                    alloc.trial_id,
                    alloc,
                    f"instance {agent_id} is being interrupted (spot/preemptible): the trial "
                    "checkpoints, stops and queues again without counting a failure",
                )
            preempted.append(alloc.id)
        db.session.commit()
    for aid in preempted:
        hub().notify(preempt_key(aid))
    log.warning(
        "agent %s: interruption notice; preempting %d allocation(s)", agent_id, len(preempted)
    )
    request_schedule()
    return {"preempted": preempted}
