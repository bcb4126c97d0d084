"""Models, versions and aliases. A version copies its checkpoint's record (with lineage: trial,
experiment, hparams, validation metrics) so it outlives the experiment's rows."""

from __future__ import annotations

import logging
import re
from typing import Any

from sqlalchemy import func, select

from master.ckpt import replan
from master.ckpt.states import CheckpointState, state_of
from master.db import db, iso, utcnow
from master.errors import BadRequest, Conflict, NotFound
from master.field_limits import check_labels, check_text
from master.models import (
    Checkpoint,
    Experiment,
    Metric,
    Model,
    ModelAlias,
    ModelAliasEvent,
    ModelVersion,
    Trial,
    User,
)
from master.services.checkpoint.checkpoints import checkpoint_json

log = logging.getLogger("detlab.registry")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\- ]{0,255}$")
_ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,127}$")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name.isdigit():
        raise BadRequest(
            "model name must be 1-256 letters, digits, '_', '.', '-' or spaces, start with a "
            f"letter or digit and not be all digits; got {name!r}",
            path="name",
        )
    return name


MAX_VERSION_NAME = 256  # model_versions.name is VARCHAR(256)


def _opt_str(body: dict, key: str) -> str | None:
    """description, comment, notes or a version's name, bounded (master/field_limits.py)."""
    if key == "name":
        return check_text(body.get(key), key, MAX_VERSION_NAME)
    return check_text(body.get(key), key)


def _labels(body: dict) -> list[str] | None:
    v = body.get("labels")
    return None if v is None else check_labels(v)


def _metadata(body: dict) -> dict | None:
    v = body.get("metadata")
    if v is None:
        return None
    if not isinstance(v, dict):
        raise BadRequest("metadata must be an object", path="metadata")
    return v


def _number(ref: str | int) -> int | None:
    """`ref` as a row number when it is one (ASCII digits within an INTEGER column), else None.

    `str.isdigit` alone accepts '¹' and digits past the column's range, which `int()` and the
    database then refuse with a 500.
    """
    if isinstance(ref, int):
        return ref if 0 <= ref < 2**31 else None
    if ref.isascii() and ref.isdigit() and len(ref) < 11 and int(ref) < 2**31:
        return int(ref)
    return None


# -- models ------------------------------------------------------------------------------------
def get_model(ref: str) -> Model:
    if "\x00" in ref:  # no name holds NUL (and PostgreSQL refuses the parameter)
        raise NotFound(f"model {ref!r} not found")
    m = db.session.execute(select(Model).where(Model.name == ref)).scalar_one_or_none()
    if m is None and (number := _number(ref)) is not None:
        m = db.session.get(Model, number)
    if m is None:
        raise NotFound(f"model {ref!r} not found")
    return m


def create_model(owner_id: int | None, body: dict) -> Model:
    name = _check_name(body.get("name"))
    if db.session.execute(select(Model.id).where(Model.name == name)).first():
        raise Conflict(f"a model named {name!r} already exists")
    m = Model(
        name=name,
        description=_opt_str(body, "description"),
        notes=_opt_str(body, "notes"),
        labels=_labels(body) or [],
        metadata_=_metadata(body) or {},
        owner_id=owner_id,
    )
    db.session.add(m)
    db.session.commit()
    return m


def list_models(archived: bool | None = None, name: str | None = None) -> list[Model]:
    q = select(Model).order_by(Model.id)
    if archived is not None:
        q = q.where(Model.archived == archived)
    if name:
        q = q.where(Model.name.contains(name))
    return list(db.session.execute(q).scalars())


def patch_model(m: Model, body: dict) -> Model:
    if m.archived and set(body) - {"archived"}:
        raise Conflict(f"model {m.name!r} is archived; unarchive it to change it")
    if "name" in body and body["name"] != m.name:
        name = _check_name(body["name"])
        if db.session.execute(select(Model.id).where(Model.name == name)).first():
            raise Conflict(f"a model named {name!r} already exists")
        m.name = name
    for key in ("description", "notes"):
        if key in body:
            setattr(m, key, _opt_str(body, key))
    if "labels" in body:
        m.labels = _labels(body) or []
    if "metadata" in body:
        m.metadata_ = {**(m.metadata_ or {}), **(_metadata(body) or {})}
    if "remove_metadata" in body:
        # `metadata` merges (top-level keys replaced); these keys go (the SDK's
        # Model.remove_metadata). A missing key is not an error, as in Determined.
        gone = body["remove_metadata"]
        if not isinstance(gone, list) or not all(isinstance(k, str) for k in gone):
            raise BadRequest("remove_metadata must be a list of key names", path="remove_metadata")
        m.metadata_ = {k: v for k, v in (m.metadata_ or {}).items() if k not in set(gone)}
    m.updated_at = utcnow()
    db.session.commit()
    return m


def set_archived(m: Model, archived: bool) -> Model:
    m.archived = archived
    m.updated_at = utcnow()
    db.session.commit()
    return m


def delete_model(m: Model) -> list[str]:
    """Delete the model and its versions; returns checkpoints left without rows or versions."""
    uuids = [v.checkpoint_uuid for v in versions_of(m)]
    db.session.delete(m)
    db.session.commit()
    _unprotected(uuids)
    return _orphans(uuids)


def _orphans(uuids: list[str]) -> list[str]:
    """Registered checkpoints whose experiment is gone and that no version names any more:
    nothing would ever delete their files, so they are reported (for `det checkpoint delete`
    or the bucket's own lifecycle rules)."""
    out = []
    for u in uuids:
        still = db.session.execute(
            select(ModelVersion.id).where(ModelVersion.checkpoint_uuid == u)
        ).first()
        if not still and db.session.get(Checkpoint, u) is None:
            out.append(u)
    return out


def model_json(m: Model) -> dict[str, Any]:
    n = db.session.execute(
        select(func.count(ModelVersion.id)).where(ModelVersion.model_id == m.id)
    ).scalar_one()
    return {
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "labels": m.labels or [],
        "metadata": m.metadata_ or {},
        "notes": m.notes,
        "archived": m.archived,
        "username": m.owner.username if m.owner else None,
        "num_versions": n,
        "creation_time": iso(m.created_at),
        "last_updated_time": iso(m.updated_at),
        "aliases": {a: v for a, v in aliases_of(m).items()},
    }


# -- versions ----------------------------------------------------------------------------------
def versions_of(m: Model) -> list[ModelVersion]:
    return list(
        db.session.execute(
            select(ModelVersion).where(ModelVersion.model_id == m.id).order_by(ModelVersion.version)
        ).scalars()
    )


def get_version(m: Model, ref: str | int) -> ModelVersion:
    """A version by number, or by alias name."""
    if isinstance(ref, int) or str(ref).isdigit():
        number = _number(ref)
        v = (
            None
            if number is None
            else db.session.execute(
                select(ModelVersion).where(
                    ModelVersion.model_id == m.id, ModelVersion.version == number
                )
            ).scalar_one_or_none()
        )
        if v is None:
            raise NotFound(f"model {m.name!r} has no version {ref}")
        return v
    a = (
        None
        if "\x00" in str(ref)
        else db.session.execute(
            select(ModelAlias).where(ModelAlias.model_id == m.id, ModelAlias.alias == str(ref))
        ).scalar_one_or_none()
    )
    if a is None:
        raise NotFound(f"model {m.name!r} has no alias {ref!r}")
    v = db.session.get(ModelVersion, a.version_id)
    assert v is not None
    return v


def _lineage(c: Checkpoint) -> dict[str, Any]:
    trial = db.session.get(Trial, c.trial_id)
    exp = db.session.get(Experiment, c.experiment_id)
    val = db.session.execute(
        select(Metric.metrics)
        .where(
            Metric.trial_id == c.trial_id,
            Metric.group == "validation",
            Metric.steps_completed == c.steps_completed,
        )
        .order_by(Metric.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    return {
        "hparams": trial.hparams if trial else None,
        "experiment_name": exp.name if exp else None,
        "searcher_metric": exp.conf.searcher.metric if exp else None,
        "validation_metrics": val,
    }


def register_version(m: Model, owner_id: int | None, body: dict) -> ModelVersion:
    if m.archived:
        raise Conflict(f"model {m.name!r} is archived; unarchive it to add versions")
    uuid = body.get("checkpoint_uuid", body.get("checkpointUuid"))
    if not isinstance(uuid, str) or not uuid:
        raise BadRequest("checkpoint_uuid is required", path="checkpoint_uuid")
    c = db.session.get(Checkpoint, uuid)
    if c is None:
        raise NotFound(f"checkpoint {uuid} not found")
    if state_of(c) != CheckpointState.ACTIVE:
        raise Conflict(f"checkpoint {uuid} is {c.state}; only ACTIVE checkpoints can be registered")
    exp = db.session.get(Experiment, c.experiment_id)
    # Lock the model row so concurrent registrations get distinct numbers.
    db.session.execute(select(Model.id).where(Model.id == m.id).with_for_update())
    last = db.session.execute(
        select(func.max(ModelVersion.version)).where(ModelVersion.model_id == m.id)
    ).scalar_one()
    v = ModelVersion(
        model_id=m.id,
        version=(last or 0) + 1,
        checkpoint_uuid=uuid,
        checkpoint={**checkpoint_json(c), "lineage": _lineage(c)},
        storage_config=exp.conf.checkpoint_storage.to_json() if exp else {},
        name=_opt_str(body, "name"),
        comment=_opt_str(body, "comment"),
        notes=_opt_str(body, "notes"),
        labels=_labels(body) or [],
        metadata_=_metadata(body) or {},
        owner_id=owner_id,
    )
    db.session.add(v)
    m.updated_at = utcnow()
    db.session.commit()
    return v


def patch_version(v: ModelVersion, body: dict) -> ModelVersion:
    for key in ("name", "comment", "notes"):
        if key in body:
            setattr(v, key, _opt_str(body, key))
    if "labels" in body:
        v.labels = _labels(body) or []
    if "metadata" in body:
        v.metadata_ = {**(v.metadata_ or {}), **(_metadata(body) or {})}
    db.session.commit()
    return v


def delete_version(v: ModelVersion) -> list[str]:
    uuid = v.checkpoint_uuid
    db.session.delete(v)
    db.session.commit()
    _unprotected([uuid])
    return _orphans([uuid])


def _unprotected(uuids: list[str]) -> None:
    """Checkpoints no longer registered: their experiments' GC plans them again."""
    replan.changed(
        db.session.execute(
            select(Checkpoint.experiment_id).where(Checkpoint.uuid.in_(uuids))
        ).scalars()
    )


def version_json(v: ModelVersion, m: Model | None = None) -> dict[str, Any]:
    m = m or db.session.get(Model, v.model_id)
    assert m is not None
    ckpt = dict(v.checkpoint or {})
    live = db.session.get(Checkpoint, v.checkpoint_uuid)
    if live is not None:
        ckpt.update(state=live.state, state_reason=live.state_reason)
    owner = db.session.get(User, v.owner_id) if v.owner_id else None
    return {
        "id": v.id,
        "version": v.version,
        "model_name": m.name,
        "model_id": m.id,
        "name": v.name,
        "comment": v.comment,
        "notes": v.notes,
        "labels": v.labels or [],
        "metadata": v.metadata_ or {},
        "username": owner.username if owner else None,
        "creation_time": iso(v.created_at),
        "checkpoint": ckpt,
        "aliases": sorted(a for a, n in aliases_of(m).items() if n == v.version),
    }


# -- aliases -----------------------------------------------------------------------------------
def aliases_of(m: Model) -> dict[str, int]:
    rows = db.session.execute(
        select(ModelAlias.alias, ModelVersion.version)
        .join(ModelVersion, ModelVersion.id == ModelAlias.version_id)
        .where(ModelAlias.model_id == m.id)
        .order_by(ModelAlias.alias)
    ).all()
    return {a: n for a, n in rows}


def set_alias(m: Model, alias: str, version: Any, user: User | None) -> dict[str, Any]:
    if not isinstance(alias, str) or not _ALIAS.match(alias) or alias.isdigit():
        raise BadRequest(
            "alias must start with a letter and hold letters, digits, '_', '.', '-'; "
            f"got {alias!r}",
            path="alias",
        )
    if isinstance(version, bool) or not isinstance(version, int):
        raise BadRequest("version must be an integer", path="version")
    v = get_version(m, version)
    a = db.session.execute(
        select(ModelAlias).where(ModelAlias.model_id == m.id, ModelAlias.alias == alias)
    ).scalar_one_or_none()
    before = None
    if a is None:
        a = ModelAlias(model_id=m.id, alias=alias, version_id=v.id)
        db.session.add(a)
    else:
        old = db.session.get(ModelVersion, a.version_id)
        before = old.version if old else None
        a.version_id = v.id
    a.updated_by = user.id if user else None
    a.updated_at = utcnow()
    db.session.add(
        ModelAliasEvent(
            model_id=m.id,
            alias=alias,
            from_version=before,
            to_version=v.version,
            username=user.username if user else None,
        )
    )
    db.session.commit()
    return {"alias": alias, "version": v.version, "previous_version": before}


def remove_alias(m: Model, alias: str, user: User | None) -> None:
    a = db.session.execute(
        select(ModelAlias).where(ModelAlias.model_id == m.id, ModelAlias.alias == alias)
    ).scalar_one_or_none()
    if a is None:
        raise NotFound(f"model {m.name!r} has no alias {alias!r}")
    old = db.session.get(ModelVersion, a.version_id)
    db.session.delete(a)
    db.session.add(
        ModelAliasEvent(
            model_id=m.id,
            alias=alias,
            from_version=old.version if old else None,
            to_version=None,
            username=user.username if user else None,
        )
    )
    db.session.commit()


def alias_history(m: Model) -> list[dict[str, Any]]:
    rows = db.session.execute(
        select(ModelAliasEvent).where(ModelAliasEvent.model_id == m.id).order_by(ModelAliasEvent.id)
    ).scalars()
    return [
        {
            "alias": e.alias,
            "from_version": e.from_version,
            "to_version": e.to_version,
            "username": e.username,
            "at": iso(e.at),
        }
        for e in rows
    ]


# -- checkpoints outliving their experiment ------------------------------------------------------
def registered_checkpoint(uuid: str) -> Checkpoint | None:
    """A registered checkpoint whose rows were deleted with its experiment, rebuilt (not stored)
    from the newest version's copy; None when the checkpoint row exists or none is registered."""
    from master.services.checkpoint.checkpoints import is_uuid

    if not is_uuid(uuid) or db.session.get(Checkpoint, uuid) is not None:
        return None
    v = db.session.execute(
        select(ModelVersion)
        .where(ModelVersion.checkpoint_uuid == uuid)
        .order_by(ModelVersion.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    if v is None:
        return None
    snap = v.checkpoint or {}
    c = Checkpoint(
        uuid=uuid,
        trial_id=snap.get("trial_id"),
        experiment_id=snap.get("experiment_id"),
        allocation_id=snap.get("allocation_id"),
        steps_completed=snap.get("steps_completed") or 0,
        metadata_=snap.get("metadata") or {},
        resources=snap.get("resources") or {},
        size=snap.get("size") or 0,
        state=CheckpointState.ACTIVE.value,
        storage=snap.get("storage") or {},
    )
    c.det_storage_config = dict(v.storage_config or {})  # type: ignore[attr-defined]
    return c
