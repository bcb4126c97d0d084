"""The provider pools with their instances and launch errors, as people see them (the REST
API's `/provisioner/pools`, `det agent pools` and the cluster page read this)."""

from __future__ import annotations

from flask import current_app
from sqlalchemy import select

from master.db import db, iso
from master.models import Instance, ProvisionerPool
from master.provisioner.states import LIVE


def instance_json(row: Instance) -> dict:
    return {
        "id": row.id,
        "pool": row.pool,
        "provider": row.provider,
        "cloud_id": row.cloud_id,
        "agent_id": row.cloud_id,
        "state": row.state,
        "state_reason": row.state_reason,
        "instance_type": row.instance_type,
        "slots": row.slots,
        "spot": row.spot,
        "launched_at": iso(row.launched_at),
        "connected_at": iso(row.connected_at),
        "last_busy_at": iso(row.last_busy_at),
        "interrupted_at": iso(row.interrupted_at),
        "terminated_at": iso(row.terminated_at),
        "last_error": row.last_error,
    }


def pools_json(history: int = 20) -> list[dict]:
    out = []
    for pool in current_app.config["DET"].resource_pools:
        pc = pool.provider
        if pc is None:
            continue
        prow = db.session.get(ProvisionerPool, pool.name)
        rows = list(
            db.session.execute(
                select(Instance)
                .where(Instance.pool == pool.name)
                .order_by(Instance.launched_at.desc())
            ).scalars()
        )
        live = [r for r in rows if r.state in LIVE or r.state == "TERMINATING"]
        ended = [r for r in rows if r not in live][:history]
        out.append(
            {
                "name": pool.name,
                "provider": pc.type,
                "instance_type": pc.instance_type_name,
                "instance_slots": pc.instance_slots,
                "min_instances": pc.min_instances,
                "max_instances": pc.max_instances,
                "instances": [instance_json(r) for r in live],
                "pending_launches": sum(1 for r in live if r.state in ("LAUNCHING", "STARTING")),
                "recent": [instance_json(r) for r in ended],
                "last_error": prow.last_error if prow else None,
                "last_error_at": iso(prow.last_error_at) if prow else None,
                "backoff_until": iso(prow.backoff_until) if prow else None,
            }
        )
    return out
