"""Checkpoints: register (trials), list/describe/download (people and trials)."""

from __future__ import annotations

import io
import os
import tarfile

from flask import Blueprint, Response, jsonify, request

from master.api._util import int_arg, json_body
from master.auth import principal, require_trial_access
from master.errors import BadRequest, Forbidden, NotFound
from master.services import checkpoints as svc
from master.services.trials import get_trial

bp = Blueprint("checkpoints", __name__)


@bp.post("/checkpoints")
def register():  # type: ignore[no-untyped-def]
    body = json_body()
    trial_id = body.get("trial_id")
    if isinstance(trial_id, bool) or not isinstance(trial_id, int):
        raise BadRequest("trial_id must be an integer", path="trial_id")
    p = require_trial_access(trial_id, write=True)
    if p.kind != "allocation":
        raise Forbidden("checkpoints are registered by trials (their session token)")
    ckpt = svc.register(get_trial(trial_id), p.allocation_id, body)
    return jsonify({"checkpoint": svc.checkpoint_json(ckpt)}), 201


def _readable(uuid: str):  # type: ignore[no-untyped-def]
    from master.registry.service import registered_checkpoint

    ckpt = registered_checkpoint(uuid) or svc.get(uuid)  # a registered one outlives its rows
    p = principal()
    if p.kind == "allocation" and p.experiment_id != ckpt.experiment_id:
        raise Forbidden("this session token belongs to another experiment")
    if p.kind == "agent":
        raise Forbidden("agents may not read checkpoints")
    return ckpt


@bp.get("/checkpoints/<uuid>")
def describe(uuid: str):  # type: ignore[no-untyped-def]
    return jsonify({"checkpoint": svc.checkpoint_json(_readable(uuid))})


@bp.get("/checkpoints")
def list_checkpoints():  # type: ignore[no-untyped-def]
    exp_id = request.args.get("experiment_id")
    trial_id = request.args.get("trial_id")
    if exp_id is None and trial_id is None:
        raise BadRequest("give experiment_id or trial_id", path="experiment_id")
    p = principal()
    if p.kind == "agent":
        raise Forbidden("agents may not read checkpoints")
    # Parsed once, by int_arg: `?trial_id=` or `?trial_id=x` is a 400 (or the default), never a
    # second, unchecked int() of the raw text.
    trial = int_arg("trial_id", 0, hi=2**31 - 1) if trial_id is not None else None
    if trial is not None:
        require_trial_access(trial)
    rows = svc.checkpoints_of(
        trial_id=trial,
        experiment_id=int_arg("experiment_id", 0, hi=2**31 - 1) if exp_id is not None else None,
    )
    if p.kind == "allocation":
        rows = [c for c in rows if c.experiment_id == p.experiment_id]
    return jsonify({"checkpoints": [svc.checkpoint_json(c) for c in rows]})


@bp.get("/checkpoints/<uuid>/download")
def download(uuid: str):  # type: ignore[no-untyped-def]
    ckpt = _readable(uuid)
    path = (ckpt.storage or {}).get("path")
    buf = io.BytesIO()
    if (ckpt.storage or {}).get("type", "shared_fs") != "shared_fs":
        from master.ckpt.transfer import tar_from_storage  # s3/gcs: the master fetches them

        tar_from_storage(ckpt, buf)
    elif not path or not os.path.isdir(path):
        raise NotFound(f"checkpoint {uuid}'s files are not readable by the master ({path})")
    else:
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(path, arcname=".")
    return Response(
        buf.getvalue(),
        mimetype="application/gzip",
        headers={"Content-Disposition": f"attachment; filename={uuid}.tar.gz"},
    )
