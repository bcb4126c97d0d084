"""The REST API under /api/v1: one blueprint per resource."""

from __future__ import annotations

from flask import Flask

from master.api import agents, allocations, auth, checkpoints, experiments, jobs, trials


def register_api(app: Flask) -> None:
    for module in (auth, experiments, trials, checkpoints, agents, allocations, jobs):
        app.register_blueprint(module.bp, url_prefix="/api/v1")
    from master.provisioner import api as provisioner_api

    app.register_blueprint(provisioner_api.bp, url_prefix="/api/v1")
