"""A trial's page (charts, hparams, checkpoints, logs) and the compare page."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, render_template, request, stream_with_context
from flask.typing import ResponseReturnValue

from master.api._util import bool_arg, float_arg, int_arg
from master.db import utcnow
from master.errors import BadRequest
from master.models import Trial
from master.services.checkpoint.checkpoints import checkpoints_of
from master.services.experiment.experiment_list import live_allocation_states
from master.services.trial import logs as log_svc
from master.services.trial.chart_series import chart_metric_names, chart_series
from master.services.trial.trial_views import iter_log_text, tail_logs, trials_by_ids
from master.services.trial.trials import get_trial, is_unmanaged
from master.states import is_terminal, trial_display_state
from master.web import format as fmt
from master.web.blueprint import bp
from master.web.failure import failure_summary
from master.web.log_levels import log_level

LOG_TAIL = 300  # lines a trial page shows at first (older ones: "older" link, or download)
MAX_COMPARE = 10


@bp.get("/trials/<int:trial_id>")
def trial(trial_id: int) -> ResponseReturnValue:
    t = get_trial(trial_id)
    alloc = live_allocation_states([t.id]).get(t.id)
    search = (request.args.get("q") or "").strip()
    before = int_arg("before", 0) or None
    logs = tail_logs(trial_id, LOG_TAIL, contains=search or None, before=before)
    for line in logs:
        line["level"] = log_level(line["line"])
    return render_template(
        "trial.html",
        **_head_context(t, alloc),
        hparams=fmt.flat_hparams(t.hparams or {}),
        checkpoints=checkpoints_of(trial_id=trial_id),
        metric_names=chart_metric_names(trial_id),
        logs=logs,
        search=search,
        older=logs[0]["seq"] if len(logs) == LOG_TAIL else None,
        last_seq=logs[-1]["seq"] if logs and not before and not search else _last_seq(trial_id),
    )


def _head_context(t: Trial, alloc: tuple[str, str | None] | None) -> dict[str, Any]:
    """What the trial's header shows (the page, and its live refresh)."""
    exp = t.experiment
    return {
        "t": t,
        "exp": exp,
        "display_state": trial_display_state(
            t.state, alloc[0] if alloc else None, is_unmanaged(exp)
        ),
        "agent": alloc[1] if alloc else None,
        "default_metric": exp.conf.searcher.metric,
        "failure": failure_summary(t),
        "live": not is_terminal(t.state),
        "now": utcnow(),
    }


@bp.get("/trials/<int:trial_id>/head")
def trial_head(trial_id: int) -> ResponseReturnValue:
    """The header alone (steps, state, progress): swapped in every few seconds while it runs."""
    t = get_trial(trial_id)
    return render_template(
        "_trial_head.html", **_head_context(t, live_allocation_states([t.id]).get(t.id))
    )


def _last_seq(trial_id: int) -> int:
    newest = tail_logs(trial_id, 1)
    return newest[-1]["seq"] if newest else 0


@bp.get("/trials/<int:trial_id>/logs.json")
def trial_logs(trial_id: int) -> ResponseReturnValue:
    """New lines after `after`; with follow=1 it waits (long poll) until some arrive. (No
    query of its own: the trial's shared log tail knows whether it exists.)"""
    page = log_svc.logs_page(
        trial_id,
        int_arg("after", 0),
        int_arg("limit", 1000, 1, 5000),
        bool_arg("follow"),
        float_arg("timeout", 20.0, 0.0, 30.0),
    )
    # the level each line states (colours by level, not by stream: logging's INFO is on stderr)
    page["logs"] = [{**line, "level": log_level(line["line"])} for line in page["logs"]]
    return jsonify(page)


@bp.get("/trials/<int:trial_id>/logs.txt")
def trial_logs_download(trial_id: int) -> ResponseReturnValue:
    get_trial(trial_id)
    return Response(
        stream_with_context(iter_log_text(trial_id)),
        mimetype="text/plain",
        headers={"Content-Disposition": f'attachment; filename="trial-{trial_id}-logs.txt"'},
    )


@bp.get("/trials/<int:trial_id>/series.json")
def trial_series(trial_id: int) -> ResponseReturnValue:
    """The master's downsampled series for the charts: a long series first as a strided
    sample (fast), then with `exact=1` as the min/max envelope."""
    t = get_trial(trial_id)
    names = fmt.split_list(request.args, "names")
    if not names:
        raise BadRequest("names is required (metric names, comma-separated)", path="names")
    group = request.args.get("group") or "training"
    series, reduction = chart_series(
        trial_id,
        group,
        names[:20],
        int_arg("max_points", 1000, 10, 20_000),
        exact=bool_arg("exact"),
    )
    return jsonify(
        {
            "trial_id": trial_id,
            "group": group,
            "series": series,
            "reduction": reduction,
            "downsampled": reduction != "all",
            "state": t.state,
        }
    )


def _compare_rows(trials: list) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    flat = [fmt.flat_hparams(t.hparams or {}) for t in trials]
    hp_names = sorted({k for h in flat for k in h})
    hparams = {n: [h.get(n) for h in flat] for n in hp_names}
    latest = [
        {k: v for k, v in (t.latest_validation or {}).items() if k != "steps_completed"}
        for t in trials
    ]
    metric_names = sorted({k for m in latest for k in m})
    metrics: dict[str, list[Any]] = {
        "state": [t.state for t in trials],
        "steps completed": [t.steps_completed for t in trials],
        "best searcher metric": [t.best_validation for t in trials],
        "restarts": [t.restarts for t in trials],
    }
    metrics.update({f"latest {n}": [m.get(n) for m in latest] for n in metric_names})
    return hparams, metrics


@bp.get("/compare")
def compare() -> ResponseReturnValue:
    ids = fmt.int_list(request.args, "trials")
    error = None
    trials: list = []
    if len(ids) < 2 or len(ids) > MAX_COMPARE:
        error = f"Pick 2 to {MAX_COMPARE} trials to compare (got {len(ids)})."
    else:
        trials = trials_by_ids(ids)
    only_diff = bool_arg("diff")
    hparams, metrics = _compare_rows(trials)
    if only_diff:
        hparams, metrics = fmt.differing_rows(hparams), fmt.differing_rows(metrics)
    names: set[str] = set()
    groups: dict[str, set[str]] = {"training": set(), "validation": set()}
    for t in trials:
        for group, ns in chart_metric_names(t.id).items():
            groups[group].update(ns)
            names.update(ns)
    default = next((t.experiment.conf.searcher.metric for t in trials), None)
    return render_template(
        "compare.html",
        trials=trials,
        ids=ids,
        error=error,
        only_diff=only_diff,
        hparams=hparams,
        metrics=metrics,
        metric_names={g: sorted(v) for g, v in groups.items()},
        default_metric=default,
        args=request.args,
    ), (400 if error and ids else 200)
