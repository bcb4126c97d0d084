"""What bad input does not refuse (issue 27): agent-reported trial output is repaired, not
refused, and a huge grid within the cap is built lazily; the search cap is configurable."""

from __future__ import annotations

import json

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from master.db import db
from master.models import TaskLog
from tests.api.conftest import AGENT, login, poll, start_one, submit
from tests.api.test_bad_input import GRID, cfg


def test_a_nul_in_one_agent_log_line_is_repaired_and_the_batch_kept(
    app: Flask, client: FlaskClient
) -> None:
    """Agent log lines are trial output: one bad line must cost nothing, not even itself."""
    assert submit(client, login(client))["status"] == 201
    spec = start_one(app, client)
    alloc = spec["allocation_id"]
    lines = [
        {"allocation_id": alloc, "stream": "stdout", "line": "before"},
        {"allocation_id": alloc, "stream": "stdout", "line": "a NUL\x00 and \udc80 here"},
        {"allocation_id": alloc, "stream": "stdout", "line": None},  # malformed: dropped alone
        {"allocation_id": alloc, "stream": "stdout", "line": "after"},
    ]
    body = json.dumps({"logs": lines})  # json.dumps escapes the lone surrogate as \udc80
    r = client.post(
        "/api/v1/agents/a1/logs", data=body, headers=AGENT, content_type="application/json"
    )
    assert r.status_code == 200, r.json
    assert r.json["accepted"] == 3
    with app.app_context():
        stored = [
            t.line
            for t in db.session.execute(
                select(TaskLog).where(TaskLog.allocation_id == alloc).order_by(TaskLog.id)
            ).scalars()
        ]
    assert stored[-3:] == ["before", "a NUL\ufffd and \ufffd here", "after"]


def test_an_agent_poll_quoting_a_nul_is_repaired_not_refused(
    app: Flask, client: FlaskClient
) -> None:
    """A poll carries exit reasons that may quote trial output: refusing it would cut the
    agent off for good."""
    assert submit(client, login(client))["status"] == 201
    spec = start_one(app, client)
    alloc = {
        "id": spec["allocation_id"],
        "state": "EXITED",
        "exit_code": 1,
        "error": "crashed: \x00",
    }
    poll(client, [alloc])  # asserts a 200
    r = client.get(f"/api/v1/trials/{spec['trial_id']}/logs", headers=login(client))
    assert r.status_code == 200
    lines = [entry["line"] for entry in r.json["logs"]]
    assert any("crashed: \ufffd" in line for line in lines), lines


def test_grid_within_the_cap_but_huge_in_points_is_built_lazily(client: FlaskClient) -> None:
    """A 10**9-point grid capped by max_trials is accepted and costs no memory: only the
    points it runs are computed."""
    auth = login(client)
    text = GRID.replace("max_length: {batches: 10}}", "max_length: {batches: 10}, max_trials: 3}")
    r = client.post("/api/v1/experiments/preview", json={"config": text}, headers=auth)
    assert r.status_code == 200, r.json
    assert r.json["preview"]["grid_size"] == 10**9 and r.json["preview"]["trials"] == 3
    r = client.post("/api/v1/experiments", json={"config": text}, headers=auth)
    assert r.status_code == 201, r.json


@pytest.mark.parametrize("app", [{"max_search_trials": 5}], indirect=True)
def test_the_search_cap_is_configurable(client: FlaskClient) -> None:
    auth = login(client)
    text = cfg(replace=("name: single", "name: random, max_trials: 6"))
    r = client.post("/api/v1/experiments", json={"config": text}, headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "searcher.max_trials"
    assert "6 trials exceeds searcher cap 5" in r.json["error"]["message"]
    r = client.post("/api/v1/experiments", json={"config": text.replace("6", "5")}, headers=auth)
    assert r.status_code == 201, r.json


def test_a_model_version_name_longer_than_its_column_is_refused(
    app: Flask, client: FlaskClient
) -> None:
    from tests.api.conftest import trial_auth

    auth = login(client)
    assert submit(client, auth)["status"] == 201
    spec = start_one(app, client)
    uuid = "0b7d9b9e-8f43-4a55-9c7e-3f2b1a0c9d11"
    body = {"trial_id": spec["trial_id"], "uuid": uuid, "steps_completed": 1, "resources": {}}
    r = client.post("/api/v1/checkpoints", json=body, headers=trial_auth(spec))
    assert r.status_code == 201, r.json
    assert client.post("/api/v1/models", json={"name": "m1"}, headers=auth).status_code == 201
    long = {"checkpoint_uuid": uuid, "name": "v" * 257}
    r = client.post("/api/v1/models/m1/versions", json=long, headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "name", r.json
    assert client.get("/api/v1/models/m1/versions", headers=auth).json["model_versions"] == []


def test_a_models_metadata_keys_are_removed_by_name_and_a_bad_list_refused(
    client: FlaskClient,
) -> None:
    auth = login(client)
    body = {"name": "meta", "metadata": {"a": 1, "b": {"c": 2}}}
    assert client.post("/api/v1/models", json=body, headers=auth).status_code == 201
    r = client.patch("/api/v1/models/meta", json={"remove_metadata": ["a", "zz"]}, headers=auth)
    assert r.status_code == 200 and r.json["model"]["metadata"] == {"b": {"c": 2}}, r.json
    for bad in ("a", [1], {"a": 1}, [["a"]]):
        r = client.patch("/api/v1/models/meta", json={"remove_metadata": bad}, headers=auth)
        assert r.status_code == 400 and r.json["error"]["path"] == "remove_metadata", r.json
    assert client.get("/api/v1/models/meta", headers=auth).json["model"]["metadata"] == {
        "b": {"c": 2}
    }
