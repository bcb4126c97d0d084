"""`POST /tensorboards` (in-process master): what it resolves, what it refuses and why."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from master.services.task.tensorboards import group_sources, may_read_storage, storage_mounts
from tests.api.conftest import login, submit

CONFIG = """
name: tb-api
entrypoint: python3 train.py
hyperparameters: {lr: 0.1}
searcher: {name: single, metric: loss, max_length: {batches: 100}}
checkpoint_storage: %s
"""
S3 = {"type": "s3", "bucket": "b", "access_key": "AK", "secret_key": "tb-api-secret-value"}
SHARED = {"type": "shared_fs", "host_path": "/tmp/detlab-tb-api"}


def test_sources_are_grouped_by_experiment() -> None:
    got = group_sources([(2, 7), (1, 3), (2, 5), (2, 7)], {1: {"a": 1}, 2: {"b": 2}})
    assert got == [
        {"experiment_id": 1, "trial_ids": [3], "storage": {"a": 1}},
        {"experiment_id": 2, "trial_ids": [5, 7], "storage": {"b": 2}},
    ]


def test_a_container_gets_each_shared_fs_source_read_only_once() -> None:
    """On the docker runtime the TensorBoard reads shared_fs storage through bind mounts at the
    paths trials wrote to; object storage needs none."""
    other = {"type": "shared_fs", "host_path": "/srv/ckpt", "storage_path": "team"}
    sources = group_sources(
        [(1, 1), (2, 2), (3, 3), (4, 4)],
        {1: SHARED, 2: S3, 3: other, 4: dict(SHARED)},
    )
    assert storage_mounts(sources) == [
        {"host_path": "/srv/ckpt", "container_path": "/srv/ckpt", "read_only": True},
        {
            "host_path": SHARED["host_path"],
            "container_path": SHARED["host_path"],
            "read_only": True,
        },
    ]
    assert storage_mounts(group_sources([(1, 1)], {1: S3})) == []


def test_only_owners_and_admins_get_storage_credentials() -> None:
    assert may_read_storage(S3, owner_id=1, user_id=1, admin=False)
    assert may_read_storage(S3, owner_id=1, user_id=2, admin=True)
    assert not may_read_storage(S3, owner_id=1, user_id=2, admin=False)
    assert may_read_storage(SHARED, owner_id=1, user_id=2, admin=False)


def _user(client: FlaskClient, admin: dict, name: str) -> dict:
    r = client.post(
        "/api/v1/users", json={"username": name, "password": "pw-" + name * 3}, headers=admin
    )
    assert r.status_code == 201, r.json
    return login(client, name, "pw-" + name * 3)


def test_start_resolves_trials_and_refuses_clearly(app: Flask, client: FlaskClient) -> None:
    admin = login(client)
    bob = _user(client, admin, "bob")
    exp = submit(client, admin, CONFIG % json.dumps(S3))["experiment"]["id"]
    shared = submit(client, admin, CONFIG % json.dumps(SHARED))["experiment"]["id"]

    def start(body: dict, who: dict) -> tuple[int, dict]:
        r = client.post("/api/v1/tensorboards", json=body, headers=who)
        return r.status_code, r.json

    code, body = start({"experiment_ids": [exp]}, admin)
    assert code == 201, body
    tb = body["tensorboard"]
    assert tb["type"] == "TENSORBOARD" and tb["slots"] == 0 and tb["experiment_ids"] == [exp]
    # Its token and the storage credentials never appear in an answer.
    for text in (
        json.dumps(body),
        client.get(f"/api/v1/tensorboards/{tb['id']}", headers=admin).text,
        client.get("/api/v1/tasks", headers=admin).text,
    ):
        assert "tb-api-secret-value" not in text and "service_token" not in text

    # Determined's keys detlab does not act on: accepted, named in the warnings.
    code, body = start({"experiment_ids": [exp], "config": {"debug": True}}, admin)
    assert code == 201 and any(w.startswith("debug: ignored") for w in body["warnings"])
    assert start({}, admin)[0] == 400
    assert start({"experiment_ids": ["1"]}, admin)[0] == 400
    assert start({"experiment_ids": [exp], "config": {"bogus": 1}}, admin)[0] == 400
    assert start({"experiment_ids": [exp], "config": {"resources": [None]}}, admin)[0] == 400
    assert start({"experiment_ids": [exp], "config": []}, admin)[0] == 400
    assert start({"experiment_ids": [exp], "config": {"idle_timeout": "soon"}}, admin)[0] == 400
    code, body = start({"experiment_ids": [9999]}, admin)
    assert code == 404 and "experiment 9999" in body["error"]["message"]
    code, body = start({"trial_ids": [9999]}, admin)
    assert code == 404 and "trial 9999" in body["error"]["message"]
    # Another user: not over an experiment whose storage holds credentials; fine otherwise.
    code, body = start({"experiment_ids": [exp]}, bob)
    assert code == 403 and "credentials" in body["error"]["message"]
    assert start({"experiment_ids": [shared]}, bob)[0] == 201
    # Killing: its owner or an admin.
    r = client.post(f"/api/v1/tensorboards/{tb['id']}/kill", headers=bob)
    assert r.status_code == 403
    r = client.post(f"/api/v1/tensorboards/{tb['id']}/kill", headers=admin)
    assert r.status_code == 200 and r.json["tensorboard"]["state"] == "CANCELED"
    r = client.post("/api/v1/commands", json={"config": {"entrypoint": ["true"]}}, headers=admin)
    cmd = r.json["command"]["id"]
    assert client.get(f"/api/v1/tensorboards/{cmd}", headers=admin).status_code == 400


def _idle_timeouts(app: Flask, client: FlaskClient, configs: list[dict]) -> list[Any]:
    from master.db import db
    from master.models import Task

    admin = login(client)
    exp = submit(client, admin, CONFIG % json.dumps(SHARED))["experiment"]["id"]
    ids: list[str] = []
    for config in configs:
        r = client.post(
            "/api/v1/tensorboards", json={"experiment_ids": [exp], "config": config}, headers=admin
        )
        assert r.status_code == 201 and r.json is not None, r.json
        ids.append(r.json["tensorboard"]["id"])
    with app.app_context():
        tasks = [db.session.get(Task, i) for i in ids]
        return [(t.spec or {}).get("idle_timeout") if t else "missing" for t in tasks]


def test_a_tensorboard_without_idle_timeout_gets_the_clusters_300_s(
    app: Flask, client: FlaskClient
) -> None:
    """Determined's master default `tensorboard_timeout: 300`; a config's own one wins."""
    got = _idle_timeouts(app, client, [{}, {"idle_timeout": "2h"}])
    assert got == [300.0, 7200.0]


@pytest.mark.parametrize("app", [{"tensorboard_timeout": None}], indirect=True)
def test_tensorboard_timeout_null_means_never(app: Flask, client: FlaskClient) -> None:
    assert _idle_timeouts(app, client, [{}, {"idle_timeout": 45}]) == [None, 45.0]
