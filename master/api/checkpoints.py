"""Checkpoints: register (trials), list/describe/download (people and trials)."""

from __future__ import annotations

import os

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue

from master.api._util import int_arg, json_body
from master.auth import principal, require_trial_access, require_user
from master.errors import BadRequest, Forbidden, NotFound
from master.models import Checkpoint
from master.services.checkpoint import checkpoints as svc
from master.services.experiment.experiments import get_experiment
from master.services.trial.trials import get_trial

bp = Blueprint("checkpoints", __name__)


@bp.post("/checkpoints")
def register() -> ResponseReturnValue:
    body = json_body()
    trial_id = body.get("trial_id")
    if isinstance(trial_id, bool) or not isinstance(trial_id, int):
        raise BadRequest("trial_id must be an integer", path="trial_id")
    # The trial's own token, or an unmanaged trial's owner (it has no allocation).
    p = require_trial_access(trial_id, write=True)
    ckpt = svc.register(get_trial(trial_id), p.allocation_id, body)
    return jsonify({"checkpoint": svc.checkpoint_json(ckpt)}), 201


def _readable(uuid: str) -> Checkpoint:
    from master.registry.service import registered_checkpoint

    ckpt = registered_checkpoint(uuid) or svc.get(uuid)  # a registered one outlives its rows
    p = principal()
    if p.kind == "allocation" and p.experiment_id != ckpt.experiment_id:
        raise Forbidden("this session token belongs to another experiment")
    if p.kind == "agent":
        raise Forbidden("agents may not read checkpoints")
    return ckpt


@bp.get("/checkpoints/<uuid>")
def describe(uuid: str) -> ResponseReturnValue:
    return jsonify({"checkpoint": svc.checkpoint_json(_readable(uuid))})


@bp.patch("/checkpoints/<uuid>/metadata")
def edit_metadata(uuid: str) -> ResponseReturnValue:
    """`{"add": {...}, "remove": [keys]}`: the experiment's owner or an admin."""
    p = require_user()
    ckpt = svc.get(uuid)
    exp = get_experiment(ckpt.experiment_id)
    if not p.admin and exp.owner_id != p.user_id:
        raise Forbidden(
            f"checkpoint {uuid} belongs to experiment {exp.id} of {exp.owner.username}; "
            "only its owner or an admin may change its metadata"
        )
    body = json_body()
    ckpt = svc.edit_metadata(ckpt, body.get("add", {}), body.get("remove", []))
    return jsonify({"checkpoint": svc.checkpoint_json(ckpt)})


@bp.get("/checkpoints")
def list_checkpoints() -> ResponseReturnValue:
    exp_id = request.args.get("experiment_id")
    trial_id = request.args.get("trial_id")
    if exp_id is None and trial_id is None:
        raise BadRequest("give experiment_id or trial_id", path="experiment_id")
    p = principal()
    if p.kind == "agent":
        raise Forbidden("agents may not read checkpoints")
    # Parsed once, by int_arg: `?trial_id=` or `?trial_id=x` is a 400 (or the default), never a
    # second, unchecked int() of the raw text. An unknown id is "not found" like everywhere
    # else, never an empty list.
    # An empty value means no filter (0 names no row).
    tid = int_arg("trial_id", 0, hi=2**31 - 1) or None if trial_id is not None else None
    eid = int_arg("experiment_id", 0, hi=2**31 - 1) or None if exp_id is not None else None
    if tid is not None:
        require_trial_access(tid)
        get_trial(tid)
    if eid is not None:
        get_experiment(eid)
    rows = svc.checkpoints_of(trial_id=tid, experiment_id=eid)
    if p.kind == "allocation":
        rows = [c for c in rows if c.experiment_id == p.experiment_id]
    return jsonify({"checkpoints": [svc.checkpoint_json(c) for c in rows]})


@bp.get("/checkpoints/<uuid>/download")
def download(uuid: str) -> ResponseReturnValue:
    from master.ckpt import transfer

    ckpt = _readable(uuid)
    path = (ckpt.storage or {}).get("path")
    if (ckpt.storage or {}).get("type", "shared_fs") != "shared_fs":
        opener = transfer.opener_from_storage(ckpt)  # s3/gcs: the master fetches them
    elif not path or not os.path.isdir(path):
        raise NotFound(f"checkpoint {uuid}'s files are not readable by the master ({path})")
    else:
        opener = transfer.opener_for_dir(path)
    # Streamed as it is written: the first bytes leave at once, memory stays bounded.
    return Response(
        transfer.tar_stream(opener, uuid),
        mimetype="application/gzip",
        headers={"Content-Disposition": f"attachment; filename={uuid}.tar.gz"},
    )
