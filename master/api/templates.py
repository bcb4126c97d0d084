"""Configuration templates: list, describe, set (create or replace), remove, render."""

from __future__ import annotations

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from detlab.expconf import load_yaml, warnings_for
from master.api._util import json_body
from master.auth import require_user
from master.errors import BadRequest
from master.services.experiment import templates as svc

bp = Blueprint("templates", __name__)


@bp.get("/templates")
def list_templates() -> ResponseReturnValue:
    require_user()
    return jsonify({"templates": [svc.template_json(t) for t in svc.list_templates()]})


@bp.get("/templates/<name>")
def describe(name: str) -> ResponseReturnValue:
    require_user()
    return jsonify({"template": svc.template_json(svc.get_template(name))})


@bp.put("/templates/<name>")
def put(name: str) -> ResponseReturnValue:
    p = require_user()
    body = json_body()
    if "config" not in body:
        raise BadRequest("'config' (the template, YAML text or a mapping) is required", "config")
    t, created = svc.set_template(name, body["config"], p)
    return jsonify({"template": svc.template_json(t)}), 201 if created else 200


@bp.delete("/templates/<name>")
def remove(name: str) -> ResponseReturnValue:
    svc.remove_template(name, require_user())
    return jsonify({"removed": name})


@bp.post("/templates/<name>/render")
def render(name: str) -> ResponseReturnValue:
    require_user()
    body = json_body()
    text = body.get("config")
    if not isinstance(text, str):
        raise BadRequest("'config' (the experiment YAML) is required", path="config")
    merged, sources = svc.apply_template(name, load_yaml(text), str(body.get("source") or "config"))
    return jsonify({"config": merged, "sources": sources, "warnings": warnings_for(merged)})
