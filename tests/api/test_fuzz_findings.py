"""Requests schemathesis found answered with a 500 (tests/api/test_api_fuzz.py), each now a 4xx."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from master.jsontext import first_nul
from tests.api.conftest import AGENT, login, start_one, submit, trial_auth


def test_a_json_list_as_the_experiment_body_is_a_400(client: FlaskClient) -> None:
    auth = login(client)
    r = client.post("/api/v1/experiments?validate_only=true", json=[None, None], headers=auth)
    assert r.status_code == 400, r.json
    assert "JSON object" in r.json["error"]["message"]


def test_a_checkpoint_uuid_that_is_no_uuid_is_named(client: FlaskClient) -> None:
    auth = login(client)
    r = client.delete(
        "/api/v1/checkpoints", json={"checkpoint_uuids": ["=x", "a\x00b"]}, headers=auth
    )
    assert r.status_code == 400, r.json
    # Either bad entry may be named first: the NUL is refused as the body is parsed.
    assert r.json["error"]["path"] in ("checkpoint_uuids[0]", "checkpoint_uuids[1]")
    r = client.delete("/api/v1/checkpoints", json={"checkpoint_uuids": ["=x"]}, headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "checkpoint_uuids[0]", r.json
    for path in ("/api/v1/checkpoints/a%00b", "/api/v1/checkpoints/a%00b/download"):
        r = client.get(path, headers=auth)
        assert r.status_code == 400 and r.json["error"]["path"] == "uuid", r.json
    assert client.get("/api/v1/checkpoints/not-a-uuid", headers=auth).status_code == 404


def test_a_nul_in_the_login_name_is_a_400(client: FlaskClient) -> None:
    r = client.post("/api/v1/auth/login", json={"username": "ad\x00min", "password": "x"})
    assert r.status_code == 400, r.json
    assert r.json["error"]["path"] == "username"


def test_repeated_or_empty_trial_id_is_parsed_once(client: FlaskClient) -> None:
    auth = login(client)
    exp_id = submit(client, auth)["experiment"]["id"]
    r = client.get(f"/api/v1/checkpoints?experiment_id={exp_id}&trial_id=&trial_id=x", headers=auth)
    assert r.status_code == 200, r.json  # the first value counts, and '' means the default
    r = client.get("/api/v1/checkpoints?trial_id=x", headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "trial_id"


def test_model_and_version_refs_that_are_not_row_numbers_are_404s(client: FlaskClient) -> None:
    auth = login(client)
    assert client.post("/api/v1/models", json={"name": "m1"}, headers=auth).status_code == 201
    for path in (
        "/api/v1/models/%C2%B9",  # '¹' passes str.isdigit() but not int()
        "/api/v1/models/99999999999999999999",  # past the INTEGER column
        "/api/v1/models/m1/versions/%C2%B9",
        "/api/v1/models/m1/versions/99999999999999999999",
    ):
        r = client.get(path, headers=auth)
        assert r.status_code == 404, (path, r.json)
    # A NUL in a path segment is refused before any lookup, naming the segment.
    for path, name in (
        ("/api/v1/models/a%00b", "ref"),
        ("/api/v1/models/m1/versions/a%00b", "version"),
    ):
        r = client.get(path, headers=auth)
        assert r.status_code == 400 and r.json["error"]["path"] == name, (path, r.json)


def test_a_nul_in_a_query_filter_is_a_400_naming_it(client: FlaskClient) -> None:
    auth = login(client)
    for path, name in (
        ("/api/v1/models?name=a%00", "name"),
        ("/api/v1/experiments?user=a%00", "user"),
        ("/api/v1/job-queues?pool=a%00", "pool"),
    ):
        r = client.get(path, headers=auth)
        assert r.status_code == 400, (path, r.json)
        assert r.json["error"]["path"] == name


@pytest.mark.parametrize(
    "body, path",
    [
        ({"metadata": {"a": [1, {"b": "x\x00"}]}}, "metadata.a[1].b"),
        ({"metadata": {"k\x00": 1}}, "metadata"),
        ({"resources": {"f\x00": 1}}, "resources"),
        ({"resources": {"a": 2**62, "b": 2**62}}, "resources"),  # past BIGINT in all
        ({"resources": {"a": -1}}, "resources"),
        ({"steps_completed": 2**63}, "steps_completed"),
    ],
)
def test_checkpoint_registration_refuses_what_postgresql_cannot_store(
    app: Flask, client: FlaskClient, body: dict, path: str
) -> None:
    submit(client, login(client))
    spec = start_one(app, client)
    full = {
        "uuid": "2f1e0c4e-27a4-4b0e-9a71-0a7c6b4d8d11",
        "trial_id": spec["trial_id"],
        "steps_completed": 1,
        **body,
    }
    r = client.post("/api/v1/checkpoints", json=full, headers=trial_auth(spec))
    assert r.status_code == 400, r.json
    assert r.json["error"]["path"].startswith(path)  # the field, or the very entry in it
    assert (
        client.get(f"/api/v1/checkpoints/{full['uuid']}", headers=trial_auth(spec)).status_code
        == 404
    )


def test_first_nul_walks_deep_values_without_recursion() -> None:
    deep: object = "x\x00"
    for _ in range(100_000):
        deep = [deep]
    assert first_nul(deep, "v") == "v" + "[0]" * 100_000
    assert first_nul({"a": ["ok", {"b": 1}]}, "v") is None


def test_a_nul_in_an_agent_log_line_costs_that_line_alone(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    submit(client, auth)
    spec = start_one(app, client)
    aid = spec["allocation_id"]
    lines = [
        {"allocation_id": aid, "stream": "stdout", "line": "before"},
        {"allocation_id": aid, "stream": "stdout", "line": "bad\x00line"},
        {"allocation_id": "a\x00b", "stream": "stdout", "line": "unknown allocation"},
        {"allocation_id": aid, "stream": "stdout", "line": "after"},
    ]
    r = client.post("/api/v1/agents/a1/logs", json={"logs": lines}, headers=AGENT)
    assert r.status_code == 200 and r.json == {"accepted": 3}, r.json
    page = client.get(f"/api/v1/trials/{spec['trial_id']}/logs", headers=auth).json
    own = [x["line"] for x in page["logs"] if x["stream"] == "stdout"]
    assert own == ["before", "bad\ufffdline", "after"]
    tail = client.get("/api/v1/agents/a1/allocations/a%00b/logs", headers=AGENT)
    assert tail.status_code == 400 and tail.json["error"]["path"] == "alloc_id", tail.json


def test_a_template_holding_nul_is_a_400_and_so_is_a_nul_name(client: FlaskClient) -> None:
    auth = login(client)
    r = client.put(
        "/api/v1/templates/t1", json={"config": {"labels": {"a": "x\x00"}}}, headers=auth
    )
    assert r.status_code == 400, r.json
    assert r.json["error"]["path"] == "config.labels.a"
    r = client.put("/api/v1/templates/t1", json={"config": 'description: "a\\0b"'}, headers=auth)
    assert r.status_code == 400, r.json  # YAML's \0 escape is a NUL too
    assert client.get("/api/v1/templates/t1", headers=auth).status_code == 404  # nothing stored
    r = client.get("/api/v1/templates/a%00b", headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "name", r.json
