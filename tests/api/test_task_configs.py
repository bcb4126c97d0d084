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
    assert warned == {
        "entrypoint",
        "bind_mounts",
        "work_dir",
        "environment.image",
    }  # set keys it does not act on, each named once; null/empty ones are not noise
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
