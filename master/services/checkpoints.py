"""Checkpoints: registered by trials after they wrote the files to checkpoint storage."""

from __future__ import annotations

import os
import uuid as uuidlib
from typing import Any

from sqlalchemy import select

from master.db import db, iso
from master.errors import BadRequest, Conflict, NotFound
from master.jsontext import BIGINT_MAX, first_nul
from master.models import Checkpoint, Trial


def storage_dir(config: dict, ckpt_uuid: str) -> str | None:
    """Where a shared_fs checkpoint lives on the host; None for object stores."""
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type", "shared_fs") != "shared_fs" or not storage.get("host_path"):
        return None
    base = storage["host_path"]
    if storage.get("storage_path"):
        base = os.path.join(base, storage["storage_path"])
    return os.path.join(base, ckpt_uuid)


def register(trial: Trial, allocation_id: str | None, body: dict[str, Any]) -> Checkpoint:
    raw_uuid = body.get("uuid")
    try:
        ckpt_uuid = str(uuidlib.UUID(str(raw_uuid)))
    except ValueError:
        raise BadRequest("uuid must be a UUID", path="uuid") from None
    steps = body.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= BIGINT_MAX:
        raise BadRequest(
            f"steps_completed must be an integer in [0, {BIGINT_MAX}]", path="steps_completed"
        )
    metadata = body.get("metadata") or {}
    resources = body.get("resources") or {}
    if not isinstance(metadata, dict):
        raise BadRequest("metadata must be an object", path="metadata")
    if not isinstance(resources, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in resources.values()
    ):
        raise BadRequest("resources must map relative paths to sizes >= 0", path="resources")
    if sum(resources.values()) > BIGINT_MAX:
        raise BadRequest("resources add up to more bytes than can be stored", path="resources")
    if where := first_nul(metadata, "metadata") or first_nul(resources, "resources"):
        raise BadRequest(f"{where} must not contain NUL characters", path=where)
    if db.session.get(Checkpoint, ckpt_uuid) is not None:
        raise Conflict(f"checkpoint {ckpt_uuid} is already registered")
    exp = trial.experiment
    from master.ckpt.storage import public_location

    storage = public_location(exp.config.get("checkpoint_storage") or {}, ckpt_uuid)
    ckpt = Checkpoint(
        uuid=ckpt_uuid,
        trial_id=trial.id,
        experiment_id=trial.experiment_id,
        allocation_id=allocation_id,
        steps_completed=steps,
        metadata_=metadata,
        resources=resources,
        size=sum(resources.values()),
        state="ACTIVE",  # registered only once every file is stored
        storage=storage,
    )
    db.session.add(ckpt)
    trial.latest_checkpoint = ckpt_uuid
    trial.steps_completed = max(trial.steps_completed, steps)
    db.session.commit()
    return ckpt


def is_uuid(value: object) -> bool:
    """Whether `value` is a UUID string (checkpoint ids are; anything else names none)."""
    try:
        uuidlib.UUID(str(value))
    except ValueError:
        return False
    return isinstance(value, str)


def get(ckpt_uuid: str) -> Checkpoint:
    # Not a UUID: no such checkpoint (and never a string PostgreSQL refuses, e.g. with NUL).
    ckpt = db.session.get(Checkpoint, ckpt_uuid) if is_uuid(ckpt_uuid) else None
    if ckpt is None:
        raise NotFound(f"checkpoint {ckpt_uuid} not found")
    return ckpt


def checkpoints_of(*, trial_id: int | None = None, experiment_id: int | None = None) -> list:
    q = select(Checkpoint)
    if trial_id is not None:
        q = q.where(Checkpoint.trial_id == trial_id)
    if experiment_id is not None:
        q = q.where(Checkpoint.experiment_id == experiment_id)
    return list(db.session.execute(q.order_by(Checkpoint.reported_at)).scalars())


def checkpoint_json(c: Checkpoint) -> dict:
    return {
        "uuid": c.uuid,
        "trial_id": c.trial_id,
        "experiment_id": c.experiment_id,
        "allocation_id": c.allocation_id,
        "steps_completed": c.steps_completed,
        "metadata": c.metadata_,
        "resources": c.resources,
        "size": c.size,
        "state": c.state,
        "state_reason": c.state_reason,
        "delete_attempts": c.delete_attempts or 0,
        "next_delete_at": iso(c.next_delete_at),
        "storage": c.storage,
        "reported_at": iso(c.reported_at),
    }
