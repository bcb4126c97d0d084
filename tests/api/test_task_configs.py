"""Determined's command, notebook and shell configs (issue 38): every key of theirs is accepted,
the ones detlab does not act on are named in `warnings`, anything else is refused naming it."""

from __future__ import annotations

from pathlib import Path

import yaml
from flask.testing import FlaskClient

from tests.api.conftest import login

FULL = Path(__file__).resolve().parents[1] / "compat" / "task_configs" / "notebook_full.yaml"


def test_determineds_full_notebook_config_validates(client: FlaskClient) -> None:
    config = yaml.safe_load(FULL.read_text())
    config["resources"]["slots"] = 64  # stays queued: no agent here
    r = client.post("/api/v1/notebooks", json={"config": config}, headers=login(client))
    assert r.status_code == 201, r.json
    warned = {w.split(":")[0] for w in r.json["warnings"]}
    # set keys it does not act on, each named once; null/empty ones are not noise (its image
    # and bind mounts are acted on: a Docker agent's container gets them)
    assert warned == {"entrypoint", "work_dir"}
    assert r.json["notebook"]["slots"] == 64


def test_shell_and_command_forms(client: FlaskClient) -> None:
    auth = login(client)
    shell = {"idle_timeout": "1h", "notebook_idle_type": "activity", "resources": {"slots": 64}}
    r = client.post("/api/v1/shells", json={"config": shell}, headers=auth)
    assert r.status_code == 201, r.json
    assert [w.split(":")[0] for w in r.json["warnings"]] == ["notebook_idle_type"]
    cmd = {"entrypoint": ["true"], "work_dir": "/x", "resources": {"slots": 64, "weight": 2}}
    r = client.post("/api/v1/commands", json={"config": cmd}, headers=auth)
    assert r.status_code == 201, r.json
    assert sorted(w.split(":")[0] for w in r.json["warnings"]) == ["resources.weight", "work_dir"]


def test_what_no_determined_config_has_is_refused(client: FlaskClient) -> None:
    auth = login(client)
    for config, path in (
        ({"colour": "blue"}, "config.colour"),
        ({"resources": {"gpus": 2}}, "config.resources.gpus"),
        ({"environment": {"imagee": "x"}}, "config.environment.imagee"),
        ({"bind_mounts": [{"host_path": "relative"}]}, "config.bind_mounts[0]"),
        ({"idle_timeout": "soon"}, "config.idle_timeout"),
        ({"notebook_idle_type": "never"}, "config.notebook_idle_type"),
    ):
        r = client.post("/api/v1/notebooks", json={"config": config}, headers=auth)
        assert r.status_code == 400, (config, r.json)
        assert r.json["error"]["path"].startswith(path), (config, r.json)


def test_a_tasks_image_and_bind_mounts_are_checked_and_kept(client: FlaskClient) -> None:
    auth = login(client)
    for config, path in (
        ({"environment": {"image": 5}}, "config.environment.image"),
        ({"environment": {"image": {"tpu": "x"}}}, "config.environment.image"),
        ({"environment": {"image": {"cpu": ""}}}, "config.environment.image"),
        ({"environment": {"force_pull_image": "yes"}}, "config.environment.force_pull_image"),
        ({"environment": {"registry_auth": "secret"}}, "config.environment.registry_auth"),
        ({"bind_mounts": [{"host_path": "/data"}]}, "config.bind_mounts[0]"),
    ):
        for route in ("/api/v1/commands", "/api/v1/notebooks", "/api/v1/shells"):
            body = {**config, "entrypoint": ["true"]} if route.endswith("commands") else config
            r = client.post(route, json={"config": body}, headers=auth)
            assert r.status_code == 400, (route, config, r.json)
            assert r.json["error"]["path"].startswith(path), (route, config, r.json)
    image = {"cpu": "lab/cpu:1", "cuda": "lab/cuda:1"}
    mount = {"host_path": "/data", "container_path": "/mnt/data", "read_only": True}
    config = {
        "entrypoint": ["true"],
        "resources": {"slots": 64},  # stays queued: no agent here
        "environment": {"image": image, "force_pull_image": True},
        "bind_mounts": [mount],
    }
    r = client.post("/api/v1/commands", json={"config": config}, headers=auth)
    assert r.status_code == 201, r.json
    assert r.json["warnings"] == []
    from master.db import db
    from master.models import Task

    with client.application.app_context():
        task = db.session.get(Task, r.json["command"]["id"])
        assert task is not None and task.spec is not None
        # kept whole: the agent picks by the slot it gives (a CPU agent's is not a GPU's)
        assert task.spec["environment"]["image"] == image
        assert task.spec["environment"]["force_pull_image"] is True
        assert task.spec["bind_mounts"] == [{**mount, "propagation": "rprivate"}]
