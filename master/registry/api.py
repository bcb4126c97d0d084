"""REST under /api/v1/models (Determined's paths, plus aliases)."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from master.api._util import bool_arg, json_body, str_arg
from master.auth import require_user
from master.db import db
from master.errors import BadRequest, Forbidden
from master.models import Model, User
from master.registry import service as svc

bp = Blueprint("models", __name__)


def _user() -> User | None:
    p = require_user()
    return db.session.get(User, p.user_id) if p.user_id else None


def _may_change(m: Model) -> User | None:
    p = require_user()
    if not p.admin and m.owner_id not in (None, p.user_id):
        raise Forbidden(f"model {m.name!r} belongs to another user; only its owner or an admin")
    return db.session.get(User, p.user_id) if p.user_id else None


@bp.get("/models")
def list_models() -> ResponseReturnValue:
    require_user()
    archived = bool_arg("archived") if "archived" in request.args else None
    rows = svc.list_models(archived, str_arg("name"))
    return jsonify({"models": [svc.model_json(m) for m in rows]})


@bp.post("/models")
def create_model() -> ResponseReturnValue:
    p = require_user()
    m = svc.create_model(p.user_id, json_body())
    return jsonify({"model": svc.model_json(m)}), 201


@bp.get("/models/<ref>")
def describe(ref: str) -> ResponseReturnValue:
    require_user()
    m = svc.get_model(ref)
    return jsonify({"model": svc.model_json(m)})


@bp.patch("/models/<ref>")
def patch(ref: str) -> ResponseReturnValue:
    m = svc.get_model(ref)
    _may_change(m)
    return jsonify({"model": svc.model_json(svc.patch_model(m, json_body()))})


@bp.post("/models/<ref>/archive")
def archive(ref: str) -> ResponseReturnValue:
    m = svc.get_model(ref)
    _may_change(m)
    return jsonify({"model": svc.model_json(svc.set_archived(m, True))})


@bp.post("/models/<ref>/unarchive")
def unarchive(ref: str) -> ResponseReturnValue:
    m = svc.get_model(ref)
    _may_change(m)
    return jsonify({"model": svc.model_json(svc.set_archived(m, False))})


@bp.delete("/models/<ref>")
def delete(ref: str) -> ResponseReturnValue:
    m = svc.get_model(ref)
    _may_change(m)
    name = m.name
    orphans = svc.delete_model(m)
    return jsonify({"deleted": name, "unreferenced_checkpoints": orphans})


@bp.get("/models/<ref>/versions")
def versions(ref: str) -> ResponseReturnValue:
    require_user()
    m = svc.get_model(ref)
    return jsonify(
        {
            "model": svc.model_json(m),
            "model_versions": [svc.version_json(v, m) for v in svc.versions_of(m)],
        }
    )


@bp.post("/models/<ref>/versions")
def register_version(ref: str) -> ResponseReturnValue:
    m = svc.get_model(ref)
    _may_change(m)
    p = require_user()
    v = svc.register_version(m, p.user_id, json_body())
    return jsonify({"model_version": svc.version_json(v, m)}), 201


@bp.get("/models/<ref>/versions/<version>")
def version(ref: str, version: str) -> ResponseReturnValue:
    """A version by number, or by alias (`/models/NAME/versions/production`)."""
    require_user()
    m = svc.get_model(ref)
    return jsonify({"model_version": svc.version_json(svc.get_version(m, version), m)})


@bp.patch("/models/<ref>/versions/<int:version>")
def patch_version(ref: str, version: int) -> ResponseReturnValue:
    m = svc.get_model(ref)
    _may_change(m)
    v = svc.patch_version(svc.get_version(m, version), json_body())
    return jsonify({"model_version": svc.version_json(v, m)})


@bp.delete("/models/<ref>/versions/<int:version>")
def delete_version(ref: str, version: int) -> ResponseReturnValue:
    m = svc.get_model(ref)
    _may_change(m)
    orphans = svc.delete_version(svc.get_version(m, version))
    return jsonify({"deleted": version, "unreferenced_checkpoints": orphans})


@bp.get("/models/<ref>/aliases")
def aliases(ref: str) -> ResponseReturnValue:
    require_user()
    m = svc.get_model(ref)
    return jsonify({"aliases": svc.aliases_of(m), "history": svc.alias_history(m)})


@bp.put("/models/<ref>/aliases/<alias>")
def set_alias(ref: str, alias: str) -> ResponseReturnValue:
    m = svc.get_model(ref)
    user = _may_change(m)
    body = json_body()
    if "version" not in body:
        raise BadRequest("version is required", path="version")
    return jsonify(svc.set_alias(m, alias, body["version"], user))


@bp.delete("/models/<ref>/aliases/<alias>")
def remove_alias(ref: str, alias: str) -> ResponseReturnValue:
    m = svc.get_model(ref)
    user = _may_change(m)
    svc.remove_alias(m, alias, user)
    return jsonify({"removed": alias})
