"""Trials: reads for people, and the harness's writes (metrics, searcher, early exit)."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from master.api._util import bool_arg, float_arg, int_arg, json_body, str_arg
from master.auth import require_trial_access
from master.errors import BadRequest
from master.services.checkpoint.checkpoints import checkpoint_json, checkpoints_of
from master.services.queue.kicker import request_schedule
from master.services.trial import logs as log_svc
from master.services.trial import metrics as metric_svc
from master.services.trial import trials as svc

bp = Blueprint("trials", __name__)


@bp.get("/trials/<int:trial_id>")
def describe(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id)
    return jsonify({"trial": svc.trial_json(svc.get_trial(trial_id))})


@bp.get("/trials/<int:trial_id>/metrics")
def metrics(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id)
    svc.get_trial(trial_id)
    after = request.args.get("after_steps")
    rows = metric_svc.read_metrics(
        trial_id,
        str_arg("group"),
        int_arg("after_steps", 0) if after is not None else None,
        int_arg("limit", 100_000, 1, 1_000_000),
        include_superseded=bool_arg("superseded", False),
    )
    return jsonify({"metrics": rows})


@bp.post("/trials/<int:trial_id>/metrics")
def report_metrics(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id, write=True)
    reports, batch_id = metric_svc.parse_reports_body(request.get_data(cache=False))
    n = metric_svc.ingest(svc.get_trial(trial_id), reports, batch_id)
    return jsonify({"accepted": n})


@bp.get("/trials/<int:trial_id>/logs")
def logs(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id)
    page = log_svc.logs_page(  # NotFound from the trial's shared tail
        trial_id,
        int_arg("after", 0),
        int_arg("limit", 1000, 1, 10000),
        bool_arg("follow"),
        float_arg("timeout", 30.0, 0.0, 60.0),
    )
    return jsonify(page)


@bp.get("/trials/<int:trial_id>/checkpoints")
def checkpoints(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id)
    svc.get_trial(trial_id)
    return jsonify({"checkpoints": [checkpoint_json(c) for c in checkpoints_of(trial_id=trial_id)]})


@bp.post("/trials/<int:trial_id>/progress")
def progress(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id, write=True)
    body = json_body()
    value = body.get("progress")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise BadRequest("progress must be a fraction between 0 and 1", path="progress")
    svc.set_progress(trial_id, float(value))
    return jsonify({})


@bp.get("/trials/<int:trial_id>/searcher/operation")
def operation(trial_id: int) -> ResponseReturnValue:
    p = require_trial_access(trial_id)
    # Only the trial's own process is told anything by the answer (a user merely reads it).
    return jsonify(svc.current_operation(trial_id, told_process=p.kind == "allocation"))


@bp.post("/trials/<int:trial_id>/searcher/completed_operation")
def completed_operation(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id, write=True)
    body = json_body()
    svc.complete_operation(trial_id, body.get("length"), body.get("searcher_metric"))
    request_schedule()
    return jsonify({})


@bp.post("/trials/<int:trial_id>/early_exit")
def early_exit(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id, write=True)
    svc.early_exit(trial_id, str(json_body().get("reason")))
    return jsonify({})


@bp.post("/trials/<int:trial_id>/kill")
def kill(trial_id: int) -> ResponseReturnValue:
    """Determined's KillTrial: the trial's experiment owner or an admin."""
    from master.api.experiments import _may_steer
    from master.services.trial.kill import kill_trial

    _may_steer(svc.get_trial(trial_id).experiment)
    trial = kill_trial(trial_id)
    request_schedule()
    return jsonify({"trial": svc.trial_json(trial)})


@bp.post("/trials/<int:trial_id>/unmanaged/exit")
def unmanaged_exit(trial_id: int) -> ResponseReturnValue:
    """An unmanaged trial's script says it has ended (`core_v2.close()`)."""
    require_trial_access(trial_id, write=True)
    body = json_body()
    code = body.get("exit_code")
    if isinstance(code, bool) or not isinstance(code, int) or not -(2**31) <= code < 2**31:
        raise BadRequest("exit_code must be an integer", path="exit_code")
    error = body.get("error")
    if error is not None and not isinstance(error, str):
        raise BadRequest("error must be a string", path="error")
    trial = svc.unmanaged_exited(trial_id, code, error[:4096] if error else None)
    return jsonify({"trial": svc.trial_json(trial)})


@bp.get("/trials/<int:trial_id>/metric-names")
def metric_names(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id)
    svc.get_trial(trial_id)
    return jsonify(metric_svc.metric_names(trial_id))


@bp.get("/trials/<int:trial_id>/metric-series")
def metric_series(trial_id: int) -> ResponseReturnValue:
    require_trial_access(trial_id)
    svc.get_trial(trial_id)
    names = [n for n in (str_arg("names") or "").split(",") if n]
    if not names:
        raise BadRequest("names is required (comma-separated metric names)", path="names")
    series, downsampled = metric_svc.metric_series(
        trial_id,
        str_arg("group") or "training",
        names[:50],
        int_arg("max_points", 500, 10, 100_000),
    )
    return jsonify({"series": series, "downsampled": downsampled})
