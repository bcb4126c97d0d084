"""REST for checkpoint GC: policy (set, dry run), deletions, experiment delete, agent results."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from master.api._util import json_body
from master.auth import principal, require_user
from master.ckpt import delete, gc, tensorboard_files
from master.ckpt.policy import Plan, Policy
from master.errors import BadRequest, Forbidden
from master.models import Experiment
from master.services.experiment.experiments import get_experiment

bp = Blueprint("checkpoint_gc", __name__)


def _may_change(exp: Experiment) -> None:
    p = require_user()
    if not p.admin and exp.owner_id != p.user_id:
        raise Forbidden(f"experiment {exp.id} belongs to another user; only its owner or an admin")


def _plan_json(exp: Experiment, plan: Plan, policy: Policy) -> dict:
    return {
        "experiment_id": exp.id,
        "policy": policy.to_json(),
        "keep": plan.keep,
        "delete": plan.delete,
        "bytes_freed": plan.bytes_freed,
    }


def _policy_from(values: dict, base: Policy) -> Policy:
    merged = base.to_json()
    for key, raw in values.items():
        if key not in merged:
            raise BadRequest(f"unknown GC policy key {key!r}", path=key)
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise BadRequest(f"{key} must be an integer >= 0, got {raw!r}", path=key) from None
        if isinstance(raw, bool) or value < 0:
            raise BadRequest(f"{key} must be an integer >= 0, got {raw!r}", path=key)
        merged[key] = value
    return Policy(**merged)


@bp.get("/experiments/<int:exp_id>/checkpoint-gc")
def dry_run(exp_id: int) -> ResponseReturnValue:
    """What a policy (the experiment's, with `?save_...=N` overrides) would delete now."""
    require_user()
    exp = get_experiment(exp_id)
    policy = _policy_from(dict(request.args), gc.policy_of(exp))
    return jsonify(_plan_json(exp, gc.plan_experiment(exp, policy), policy))


@bp.patch("/experiments/<int:exp_id>/gc-policy")
def set_gc_policy(exp_id: int) -> ResponseReturnValue:
    exp = get_experiment(exp_id)
    _may_change(exp)
    body = json_body()
    policy = _policy_from(body, gc.policy_of(exp))
    plan = gc.set_policy(exp, policy.to_json())
    return jsonify(_plan_json(exp, plan, policy))


@bp.get("/experiments/<int:exp_id>/checkpoint-usage")
def usage(exp_id: int) -> ResponseReturnValue:
    require_user()
    get_experiment(exp_id)
    return jsonify(gc.experiment_usage(exp_id))


@bp.delete("/checkpoints")
def delete_checkpoints() -> ResponseReturnValue:
    require_user()
    body = json_body()
    uuids = body.get("checkpoint_uuids", body.get("checkpointUuids"))
    if not isinstance(uuids, list):
        raise BadRequest("checkpoint_uuids must be a list of uuids", path="checkpoint_uuids")
    rows = delete.delete_checkpoints(uuids, lambda exp_id: _may_change(get_experiment(exp_id)))
    return jsonify({"deleting": [r.uuid for r in rows]})


@bp.delete("/experiments/<int:exp_id>")
def delete_experiment(exp_id: int) -> ResponseReturnValue:
    exp = get_experiment(exp_id)
    _may_change(exp)
    return jsonify(delete.delete_experiment(exp))


@bp.delete("/experiments/<int:exp_id>/tensorboard-files")
def delete_tensorboard_files(exp_id: int) -> ResponseReturnValue:
    """Determined's DeleteTensorboardFiles: the experiment's TensorBoard files, from storage."""
    exp = get_experiment(exp_id)
    _may_change(exp)
    return jsonify(tensorboard_files.delete_tensorboard_files(exp))


@bp.post("/checkpoints/<uuid>/deleted")
def agent_deleted(uuid: str) -> ResponseReturnValue:
    """An agent reports the outcome of a deletion it was handed: `{"error": null | "..."}`."""
    p = principal()
    if p.kind != "agent":
        raise Forbidden("only agents report checkpoint deletions")
    error = json_body().get("error")
    if error is not None and not isinstance(error, str):
        raise BadRequest("error must be a string or null", path="error")
    c = gc.agent_result(uuid, error, request.headers.get("X-Agent-Id") or "unknown")
    return jsonify({"uuid": c.uuid, "state": c.state})
