"""The REST API under /api/v1: one blueprint per resource."""

from __future__ import annotations

from flask import Flask

from master.api import (
    agents,
    allocations,
    auth,
    checkpoints,
    experiments,
    job_queue,
    master_info,
    notebooks,
    openapi,
    tasks,
    templates,
    tensorboards,
    trials,
)


def register_api(app: Flask) -> None:
    modules = (
        auth,
        experiments,
        trials,
        checkpoints,
        agents,
        allocations,
        job_queue,
        master_info,
        tasks,
        notebooks,
        tensorboards,
        templates,
        openapi,
    )
    for module in modules:
        app.register_blueprint(module.bp, url_prefix="/api/v1")
    from master.ckpt import api as checkpoint_gc
    from master.registry import api as registry

    app.register_blueprint(checkpoint_gc.bp, url_prefix="/api/v1")
    app.register_blueprint(registry.bp, url_prefix="/api/v1")

    from master.provisioner import api as provisioner_api

    app.register_blueprint(provisioner_api.bp, url_prefix="/api/v1")
