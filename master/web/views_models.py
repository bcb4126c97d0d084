"""The model registry's pages: every model, and one model's versions, aliases and lineage."""

from __future__ import annotations

from flask import render_template, request
from flask.typing import ResponseReturnValue

from master.registry import service as registry
from master.web.blueprint import bp


@bp.get("/models")
def models() -> ResponseReturnValue:
    """Models, newest activity first; archived ones only with `?archived=1`."""
    show_archived = request.args.get("archived") == "1"
    rows = [registry.model_json(m) for m in registry.list_models(None if show_archived else False)]
    rows.sort(key=lambda m: m["last_updated_time"] or "", reverse=True)
    return render_template("models.html", models=rows, show_archived=show_archived)


@bp.get("/models/<path:name>")
def model(name: str) -> ResponseReturnValue:
    """One model: its versions, each linked back to the checkpoint, trial and experiment that
    made it, its aliases and their history."""
    m = registry.get_model(name)
    versions = [registry.version_json(v, m) for v in registry.versions_of(m)]
    return render_template(
        "model.html",
        model=registry.model_json(m),
        versions=list(reversed(versions)),  # newest first
        history=list(reversed(registry.alias_history(m))),
    )
