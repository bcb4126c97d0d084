"""Experiments: submit, list, describe, steer; the model definition for agents and trials."""

from __future__ import annotations

from typing import IO

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue

from master.api._guard import require_object
from master.api._util import bool_arg, int_arg, json_body, str_arg
from master.auth import principal, require_user
from master.db import db
from master.errors import BadRequest, Forbidden, NotFound, TooLarge
from master.models import Experiment
from master.request_limits import CONFIG_BYTES
from master.rm.registry import slurm_warnings
from master.services.experiment import experiment_list, model_defs
from master.services.experiment import experiments as svc
from master.services.experiment.capacity import fit_warning
from master.services.experiment.experiment_list import check_states
from master.services.queue.kicker import request_schedule
from master.services.trial.trials import trials_json, trials_of

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
            config_text = _config_file(request.files["config"].stream)
        upload = request.files.get("model_def")
        # Werkzeug spooled the upload to a temporary file: it is copied to the database a
        # chunk at a time, never read whole into memory.
        model_def = upload.stream if upload else None
    if not isinstance(config_text, str):
        raise BadRequest("the 'config' field (experiment YAML) is required", path="config")
    template = str_arg("template") or None
    warnings = svc.config_warnings(config_text, template)
    config = svc.parse_config(config_text, template)
    cannot_fit = fit_warning(config)
    warnings += slurm_warnings(config.resources.resource_pool, config.slurm.to_json())
    if cannot_fit and bool_arg("fail_if_cannot_fit", False):
        raise BadRequest(cannot_fit, path="resources.slots_per_trial")
    warnings += [cannot_fit] if cannot_fit else []
    if bool_arg("validate_only", False):  # `det experiment create --test`: nothing is stored
        return jsonify({"config": config.to_json(), "warnings": warnings})
    assert p.user_id is not None
    exp = svc.create_experiment(
        p.user_id, config_text, model_def, activate=bool_arg("activate", True), template=template
    )
    request_schedule()
    return jsonify({"experiment": svc.experiment_json(exp), "warnings": warnings}), 201


def _config_file(stream: IO[bytes]) -> str:
    """A config sent as a file beside the model definition: its own limit, not the upload's."""
    data = stream.read(CONFIG_BYTES + 1)
    if len(data) > CONFIG_BYTES:
        raise TooLarge(f"the config file is over {CONFIG_BYTES:,} bytes", "config")
    return data.decode("utf-8", errors="replace")


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
            # `?archived=false` leaves archived experiments out (Determined's default listing).
            archived=None if str_arg("archived") is None else bool_arg("archived"),
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
    p = principal()
    # A trial reads its own experiment (Core API's get_experiment_best_validation); users any.
    if not (p.kind == "allocation" and p.experiment_id == exp_id):
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
            "original": redact_yaml(exp.original_config, exp.conf.checkpoint_storage.to_json()),
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
    from master.services.experiment.experiment_edits import patch_experiment

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


@bp.post("/experiments/<int:exp_id>/continue")
def continue_(exp_id: int) -> ResponseReturnValue:
    """Determined's ContinueExperiment: the same experiment and trial train on (see
    master/services/experiment/continuation.py); `override_config` is YAML merged over its
    config."""
    from master.services.experiment.continuation import continue_experiment

    _may_steer(svc.get_experiment(exp_id))
    override = json_body().get("override_config")
    if override is not None and not isinstance(override, str):
        raise BadRequest("override_config must be YAML text", path="override_config")
    exp = continue_experiment(exp_id, override)
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
