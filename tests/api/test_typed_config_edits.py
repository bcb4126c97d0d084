"""Edits written through the typed config (`exp.conf = exp.conf.replace(...)`) land in the
stored canonical JSON the API shows, next to the experiment's own columns."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.api.conftest import login, submit


def test_edits_reach_the_stored_config(client: FlaskClient) -> None:
    auth = login(client)
    exp_id = submit(client, auth)["experiment"]["id"]
    body = {"name": "renamed", "description": "d", "labels": ["a", "b", "a"], "max_slots": 3}
    r = client.patch(f"/api/v1/experiments/{exp_id}", json=body, headers=auth)
    assert r.status_code == 200, r.json
    r = client.patch(f"/api/v1/jobs/{exp_id}", json={"priority": 7}, headers=auth)
    assert r.status_code == 200, r.json
    config = client.get(f"/api/v1/experiments/{exp_id}/config", headers=auth).json["config"]
    assert (config["name"], config["description"], config["labels"]) == ("renamed", "d", ["a", "b"])
    assert config["resources"]["max_slots"] == 3 and config["resources"]["priority"] == 7
    assert config["max_restarts"] == 2  # the rest as submitted
    exp = client.get(f"/api/v1/experiments/{exp_id}", headers=auth).json["experiment"]
    assert (exp["name"], exp["labels"], exp["priority"]) == ("renamed", ["a", "b"], 7)
