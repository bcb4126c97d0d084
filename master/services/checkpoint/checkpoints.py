"""Checkpoints: registered by trials after they wrote the files to checkpoint storage."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from sqlalchemy import select

from master.db import db, iso
from master.errors import BadRequest, Conflict, NotFound
from master.jsontext import BIGINT_MAX, first_nul
from master.models import Checkpoint, Trial
from master.services.transitions import born
from master.states import CheckpointState


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
    _check_resources(resources)
    if where := first_nul(metadata, "metadata") or first_nul(resources, "resources"):
        raise BadRequest(f"{where} must not contain NUL characters", path=where)
    existing = db.session.get(Checkpoint, ckpt_uuid)
    if existing is not None:
        if existing.trial_id == trial.id and existing.steps_completed == steps:
            # A retry whose first attempt landed (the reply was lost in a master restart).
            return existing
        raise Conflict(f"checkpoint {ckpt_uuid} is already registered")
    exp = trial.experiment
    from master.ckpt.storage import public_location

    storage = public_location(exp.conf.checkpoint_storage.to_json(), ckpt_uuid)
    ckpt = Checkpoint(
        uuid=ckpt_uuid,
        trial_id=trial.id,
        experiment_id=trial.experiment_id,
        allocation_id=allocation_id,
        steps_completed=steps,
        metadata_=metadata,
        resources=resources,
        size=sum(resources.values()),
        state=CheckpointState.ACTIVE,  # registered only once every file is stored
        storage=storage,
    )
    db.session.add(ckpt)
    born("checkpoint", ckpt_uuid, CheckpointState.ACTIVE, f"registered by trial {trial.id}")
    trial.latest_checkpoint = ckpt_uuid
    trial.steps_completed = max(trial.steps_completed, steps)
    db.session.commit()
    return ckpt


MAX_CHECKPOINT_BYTES = 2**62  # the size column is BIGINT; a sum of sizes must fit


def _check_resources(resources: Any) -> None:
    """`{relative path: size in bytes}`: paths inside the checkpoint directory, sizes >= 0.

    A key like `../../etc/passwd` or `/etc` would name a file outside the checkpoint (and
    outside the storage root) to everything that later reads, copies or deletes by path.
    """
    if not isinstance(resources, dict):
        raise BadRequest("resources must map relative paths to sizes", path="resources")
    total = 0
    for rel, size in resources.items():
        here = f"resources.{rel}"
        parts = rel.split("/")
        if not rel or rel.startswith("/") or ".." in parts:
            raise BadRequest(
                f"resources: {rel!r} is not a relative path inside the checkpoint", path=here
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise BadRequest(f"resources: the size of {rel!r} must be an integer >= 0", path=here)
        total += size
    if total > MAX_CHECKPOINT_BYTES:
        raise BadRequest(f"resources: sizes sum to more than {MAX_CHECKPOINT_BYTES}", "resources")


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


MAX_METADATA_CHARS = 1 << 20  # what one edit may leave stored, as JSON


def edit_metadata(ckpt: Checkpoint, add: Any, remove: Any) -> Checkpoint:
    """Determined's `Checkpoint.add_metadata` (top-level keys replaced) and `remove_metadata`."""
    import json

    if not isinstance(add, dict):
        raise BadRequest("add must be an object", path="add")
    if not isinstance(remove, list) or not all(isinstance(k, str) for k in remove):
        raise BadRequest("remove must be a list of key names", path="remove")
    if where := first_nul(add, "add") or first_nul(remove, "remove"):
        raise BadRequest(f"{where} must not contain NUL characters", path=where)
    metadata = {k: v for k, v in (ckpt.metadata_ or {}).items() if k not in set(remove)}
    metadata.update(add)
    if len(json.dumps(metadata)) > MAX_METADATA_CHARS:
        raise BadRequest(
            f"metadata would exceed {MAX_METADATA_CHARS:,} characters as JSON", path="add"
        )
    ckpt.metadata_ = metadata
    db.session.commit()
    return ckpt


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
