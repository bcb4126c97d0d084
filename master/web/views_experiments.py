"""The experiments list (filters, sort, bulk actions) and one experiment's page."""

from __future__ import annotations

from typing import Any

import yaml
from flask import flash, jsonify, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from master.auth import can_steer
from master.db import utcnow
from master.errors import BadRequest, Forbidden
from master.services.checkpoint.checkpoints import checkpoints_of
from master.services.experiment import experiments as exp_svc
from master.services.experiment.experiment_list import list_experiments, live_allocation_states
from master.services.queue.kicker import request_schedule
from master.services.trial.trial_views import experiment_metric_names, learning_curves
from master.services.trial.trials import is_unmanaged, trials_of
from master.states import ACTIONS, IllegalTransition, State, trial_display_state
from master.web import format as fmt
from master.web.blueprint import bp, safe_next
from master.web.failure import failures
from master.web.searcher_view import asha_brackets, searcher_summary
from master.web.session import current_user

# What the buttons offer: "kill" stops at once; pause keeps the trials' checkpoints.
BULK_ACTIONS = ("pause", "activate", "kill")
STATE_FILTERS = [s.value for s in State]


def _list_context() -> dict[str, Any]:
    q, page, per_page = fmt.experiment_query(request.args)
    result = list_experiments(q)
    pages = max(1, (result.total + per_page - 1) // per_page)
    return {
        "q": q,
        "page": page,
        "pages": pages,
        "per_page": per_page,
        "total": result.total,
        "experiments": result.experiments,
        "trial_counts": result.trial_counts,
        "now": utcnow(),
        "args": request.args,
        "state_filters": STATE_FILTERS,
        "actions": ACTIONS,
    }


@bp.get("/experiments")
def experiments() -> ResponseReturnValue:
    return render_template("experiments.html", **_list_context())


@bp.get("/experiments/rows")
def experiment_rows() -> ResponseReturnValue:
    """The table body alone, same filters: what the page swaps in to stay live."""
    return render_template("_experiment_rows.html", **_list_context())


def _back(default: str) -> str:
    return safe_next(request.form.get("next") or default)


def _steer(exp_id: int, action: str) -> None:
    if action == "pause":
        exp_svc.pause(exp_id)
    elif action == "activate":
        exp_svc.activate(exp_id)
    elif action == "kill":
        exp_svc.cancel(exp_id, kill=True)
    else:
        raise BadRequest(f"unknown action {action!r}", path="action")


@bp.post("/experiments/bulk")
def bulk() -> ResponseReturnValue:
    action = request.form.get("action") or ""
    if action not in BULK_ACTIONS:
        raise BadRequest(f"unknown action {action!r}; expected one of {BULK_ACTIONS}", "action")
    ids = fmt.int_list(request.form, "ids")
    if not ids:
        flash("Select at least one experiment.", "error")
        return redirect(_back(url_for("web.experiments")))
    me = current_user()
    exps = [exp_svc.get_experiment(i) for i in ids]
    refused = [e.id for e in exps if not can_steer(me, e.owner_id)]
    if refused:
        raise Forbidden(
            f"experiment {refused[0]} belongs to another user; only its owner or an admin "
            "may change it (nothing was changed)"
        )
    done, skipped = [], []
    for e in exps:
        try:
            _steer(e.id, action)
            done.append(e.id)
        except IllegalTransition as why:
            skipped.append(str(why))
    request_schedule()
    if done:
        flash(f"{action.capitalize()}: experiment(s) {', '.join(map(str, done))}.")
    for reason in skipped:
        flash(f"Skipped: {reason}", "error")
    return redirect(_back(url_for("web.experiments")))


@bp.post("/experiments/<int:exp_id>/<action>")
def act(exp_id: int, action: str) -> ResponseReturnValue:
    if action not in BULK_ACTIONS:
        raise BadRequest(f"unknown action {action!r}; expected one of {BULK_ACTIONS}", "action")
    exp = exp_svc.get_experiment(exp_id)
    if not can_steer(current_user(), exp.owner_id):
        raise Forbidden(
            f"experiment {exp_id} belongs to {exp.owner.username}; "
            "only its owner or an admin may change it"
        )
    try:
        _steer(exp_id, action)
        flash(f"Experiment {exp_id}: {action} requested.")
    except IllegalTransition as why:
        flash(str(why), "error")
    request_schedule()
    return redirect(_back(url_for("web.experiment", exp_id=exp_id)))


def _trial_rows(exp_id: int) -> list[dict[str, Any]]:
    trials = trials_of(exp_id)
    allocs = live_allocation_states([t.id for t in trials])
    rows = []
    for t in trials:
        alloc = allocs.get(t.id)
        rows.append(
            {
                "t": t,
                "display_state": trial_display_state(
                    t.state, alloc[0] if alloc else None, is_unmanaged(t.experiment)
                ),
                "agent": alloc[1] if alloc else None,
                "hparams": fmt.flat_hparams(t.hparams or {}),
            }
        )
    return rows


def _detail_context(exp_id: int) -> dict[str, Any]:
    exp = exp_svc.get_experiment(exp_id)
    rows = _trial_rows(exp_id)
    searcher = exp.conf.searcher
    failed, n_failed = failures([r["t"] for r in rows])
    return {
        "exp": exp,
        "rows": rows,
        "failures": failed,
        "n_failed": n_failed,
        "hparam_names": sorted({k for r in rows for k in r["hparams"]}),
        "searcher": searcher_summary(exp.conf),
        "brackets": asha_brackets(exp.conf, exp.searcher_state),
        "metric": searcher.metric,
        "smaller_is_better": searcher.smaller_is_better,
        "now": utcnow(),
        "actions": ACTIONS,
    }


@bp.get("/experiments/<int:exp_id>")
def experiment(exp_id: int) -> ResponseReturnValue:
    ctx = _detail_context(exp_id)
    exp = ctx["exp"]
    names = experiment_metric_names([r["t"] for r in ctx["rows"]])
    ctx.update(
        metric_names=names,
        checkpoints=checkpoints_of(experiment_id=exp_id),
        config_yaml=yaml.safe_dump(exp.config, sort_keys=False, default_flow_style=False),
        scatter=[
            {
                "id": r["t"].id,
                "hparams": r["hparams"],
                "metric": r["t"].best_validation,
                "state": r["display_state"],
            }
            for r in ctx["rows"]
        ],
        scatter_axes=fmt.scatter_axes(
            exp.conf.hyperparameters, [r["hparams"] for r in ctx["rows"]]
        ),
    )
    return render_template("experiment.html", **ctx)


@bp.get("/experiments/<int:exp_id>/live")
def experiment_live(exp_id: int) -> ResponseReturnValue:
    """The header and trials table alone (swapped in every few seconds while it runs)."""
    return render_template("_experiment_live.html", **_detail_context(exp_id))


@bp.get("/experiments/<int:exp_id>/curves.json")
def curves(exp_id: int) -> ResponseReturnValue:
    exp_svc.get_experiment(exp_id)
    group = request.args.get("group") or "validation"
    metric = request.args.get("metric") or ""
    data = learning_curves(trials_of(exp_id), group, metric)
    return jsonify({"group": group, "metric": metric, "trials": data})
