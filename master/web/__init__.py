"""The master's web pages, served at `/`: one Flask blueprint, Jinja templates, a little JS.

Pages read the same services as the REST API (master/services); third-party browser code comes
from npm (package-lock.json here, installed by scripts/install into node_modules/).
"""

from __future__ import annotations

from flask import Flask


def register_web(app: Flask) -> None:
    # Importing the view modules attaches their routes to the blueprint.
    from master.web import (
        views_auth,
        views_cluster,
        views_experiments,
        views_lab,
        views_models,
        views_proxy,
        views_tasks,
        views_trials,
    )
    from master.web.blueprint import bp
    from master.web.session import configure

    assert views_auth and views_cluster and views_experiments and views_trials
    assert views_models and views_lab and views_tasks and views_proxy
    configure(app)
    app.register_blueprint(bp)
