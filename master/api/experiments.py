"""Experiments: submit, list, describe, steer; the model definition for agents and trials."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue

from master.api._guard import require_object
from master.api._util import bool_arg, int_arg, json_body, str_arg
from master.auth import principal, require_user
from master.db import db
from master.errors import BadRequest, Forbidden, NotFound
from master.models import Experiment
from master.services import experiment_list, model_defs
from master.services import experiments as svc
from master.services.experiment_list import check_states
from master.services.kicker import request_schedule
from master.services.trials import trials_json, trials_of

bp = Blueprint("experiments", __name__)


@bp.post("/experiments")
def create() -> ResponseReturnValue:
    p = require_user()
    if request.mimetype == "application/json":
        body = require_object(request.get_json(silent=True) or {})
        config_text = body.get("config")
        model_def = None
    else:
        config_text = request.form.get("config")
        if config_text is None and "config" in request.files:
            config_text = request.files["config"].read().decode("utf-8", errors="replace")
        upload = request.files.get("model_def")
        # Werkzeug spooled the upload to a temporary file: it is copied to the database a
        # chunk at a time, never read whole into memory.
        model_def = upload.stream if upload else None
    if not isinstance(config_text, str):
        raise BadRequest("the 'config' field (experiment YAML) is required", path="config")
    template = str_arg("template") or None
    warnings = svc.config_warnings(config_text, template)
    if bool_arg("validate_only", False):  # `det experiment create --test`: nothing is stored
        config = svc.parse_config(config_text, template)
        return jsonify({"config": config, "warnings": warnings})
    assert p.user_id is not None
    exp = svc.create_experiment(
        p.user_id, config_text, model_def, activate=bool_arg("activate", True), template=template
    )
    request_schedule()
    return jsonify({"experiment": svc.experiment_json(exp), "warnings": warnings}), 201


@bp.post("/experiments/preview")
def preview_search() -> ResponseReturnValue:
    """What a config's search will run (trials, lengths, ASHA rungs); nothing is created."""
    require_user()
    body = request.get_json(silent=True)
    text = body.get("config") if isinstance(body, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("the 'config' field (experiment YAML) is required", path="config")
    return jsonify({"preview": svc.preview_search(svc.parse_config(text))})


@bp.get("/experiments")
def list_experiments() -> ResponseReturnValue:
    require_user()
    states: tuple[str, ...] = ()
    if state := str_arg("state"):
        states = check_states(state.split(","))
    page = experiment_list.list_experiments(
        experiment_list.ExperimentQuery(
            states=states,
            owner=str_arg("user") or None,
            limit=int_arg("limit", 100, 1, 10000),
            offset=int_arg("offset", 0),
        )
    )
    return jsonify(
        {
            "experiments": [
                svc.experiment_json(e, num_trials=page.trial_counts.get(e.id, 0))
                for e in page.experiments
            ],
            "total": page.total,
        }
    )


@bp.get("/experiments/<int:exp_id>")
def describe(exp_id: int) -> ResponseReturnValue:
    require_user()
    exp = svc.get_experiment(exp_id)
    body: dict = {"experiment": svc.experiment_json(exp), "rung_lengths": svc.rung_lengths(exp)}
    # `?trials=false`: the experiment alone, cheap however many trials it has (for pollers).
    if bool_arg("trials", True):
        body["trials"] = trials_json(trials_of(exp_id))
    return jsonify(body)


@bp.get("/experiments/<int:exp_id>/trials")
def experiment_trials(exp_id: int) -> ResponseReturnValue:
    require_user()
    svc.get_experiment(exp_id)
    return jsonify({"trials": trials_json(trials_of(exp_id))})


@bp.get("/experiments/<int:exp_id>/config")
def config(exp_id: int) -> ResponseReturnValue:
    require_user()
    exp = svc.get_experiment(exp_id)
    from master.ckpt.storage import redact_config, redact_yaml

    return jsonify(
        {
            "config": redact_config(exp.config),
            "original": redact_yaml(exp.original_config, exp.config),
        }
    )


def _may_steer(exp: Experiment) -> None:
    p = require_user()
    if not p.admin and exp.owner_id != p.user_id:
        raise Forbidden(
            f"experiment {exp.id} belongs to {exp.owner.username}; "
            "only its owner or an admin may change it"
        )


@bp.patch("/experiments/<int:exp_id>")
def patch(exp_id: int) -> ResponseReturnValue:
    from master.services.experiment_edits import patch_experiment

    _may_steer(svc.get_experiment(exp_id))
    exp = patch_experiment(exp_id, json_body())
    request_schedule()
    return jsonify({"experiment": svc.experiment_json(exp)})


@bp.post("/experiments/<int:exp_id>/<action>")
def act(exp_id: int, action: str) -> ResponseReturnValue:
    if action not in ("pause", "activate", "cancel", "kill"):
        raise NotFound(f"unknown action {action!r}")
    _may_steer(svc.get_experiment(exp_id))
    if action == "pause":
        exp = svc.pause(exp_id)
    elif action == "activate":
        exp = svc.activate(exp_id)
    else:
        exp = svc.cancel(exp_id, kill=action == "kill")
    request_schedule()
    return jsonify({"experiment": svc.experiment_json(exp)})


@bp.get("/experiments/<int:exp_id>/model_def")
def model_def(exp_id: int) -> ResponseReturnValue:
    p = principal()
    if p.kind == "allocation" and p.experiment_id != exp_id:
        raise Forbidden("this session token belongs to another experiment")
    exp = svc.get_experiment(exp_id)
    if exp.model_def_sha256 is None:
        raise NotFound(f"experiment {exp_id} has no model definition")
    headers = {"X-Content-SHA256": exp.model_def_sha256}
    if exp.model_def_size is not None:
        headers["Content-Length"] = str(exp.model_def_size)
    # Streamed a chunk (one query) at a time: a 95 MB definition never sits in memory whole.
    return Response(
        model_defs.iter_chunks(db.engine, exp_id),
        mimetype="application/gzip",
        headers=headers,
    )
