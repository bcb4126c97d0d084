"""The job queue and metric series routes, in-process on real PostgreSQL."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from detlab.protocol import PROTOCOL_VERSION
from master.config import ResourcePoolConfig
from tests.api.conftest import CONFIG, login, poll, schedule, start_one, submit, trial_auth

TWO_POOLS = {"resource_pools": [ResourcePoolConfig("default"), ResourcePoolConfig("big")]}


def queue(client: FlaskClient, auth: dict, pool: str = "default") -> list[dict]:
    r = client.get(f"/api/v1/job-queues?pool={pool}", headers=auth)
    assert r.status_code == 200, r.json
    return r.json["pools"][0]["jobs"]


def test_queue_lists_jobs_in_order_with_reasons(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    a = submit(client, auth)["experiment"]["id"]
    b = submit(client, auth)["experiment"]["id"]
    c = submit(client, auth, CONFIG + "resources: {priority: 10}\n")["experiment"]["id"]
    poll(client)
    assert schedule(app) == 1  # one slot: the priority-10 job wins it
    jobs = queue(client, auth)
    assert [j["experiment_id"] for j in jobs] == [c, a, b]
    assert [j["position"] for j in jobs] == [1, 2, 3]
    assert [j["jobs_ahead"] for j in jobs] == [0, 1, 2]
    assert jobs[0]["state"] == "SCHEDULED" and jobs[0]["slots_held"] == 1
    assert jobs[1]["state"] == "QUEUED" and jobs[1]["reason"] == "waiting for 1 free slot(s)"
    assert jobs[1]["user"] == "admin" and jobs[1]["slots_requested"] == 1
    pool = client.get("/api/v1/job-queues", headers=auth).json["pools"][0]
    assert (pool["slots_total"], pool["slots_used"], pool["agents"]) == (1, 1, 1)


def test_moving_a_job_ahead_changes_who_starts_next(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    first = submit(client, auth)["experiment"]["id"]
    second = submit(client, auth)["experiment"]["id"]
    r = client.patch(f"/api/v1/jobs/{second}", json={"ahead_of": str(first)}, headers=auth)
    assert r.status_code == 200, r.json
    assert [j["experiment_id"] for j in queue(client, auth)] == [second, first]
    spec = start_one(app, client)
    assert spec["experiment_id"] == second
    r = client.patch(f"/api/v1/jobs/{first}", json={"behind_of": str(second)}, headers=auth)
    assert r.status_code == 200


def test_priority_and_weight_changes_are_validated(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    exp = submit(client, auth)["experiment"]["id"]
    r = client.patch(f"/api/v1/jobs/{exp}", json={"priority": 0}, headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "priority"
    r = client.patch(f"/api/v1/jobs/{exp}", json={"weight": -1}, headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "weight"
    r = client.patch(f"/api/v1/jobs/{exp}", json={"colour": "red"}, headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "colour"
    r = client.patch(f"/api/v1/jobs/{exp}", json={"priority": 5, "weight": 2}, headers=auth)
    assert (r.json["job"]["priority"], r.json["job"]["weight"]) == (5, 2.0)
    d = client.get(f"/api/v1/experiments/{exp}", headers=auth).json["experiment"]
    assert d["config"]["resources"]["priority"] == 5
    assert client.patch("/api/v1/jobs/999", json={}, headers=auth).status_code == 404


def test_only_the_owner_or_an_admin_may_steer_a_job(app: Flask, client: FlaskClient) -> None:
    admin = login(client)
    client.post(
        "/api/v1/users", json={"username": "bob", "password": "bob-password"}, headers=admin
    )
    exp = submit(client, admin)["experiment"]["id"]
    bob = login(client, "bob", "bob-password")
    r = client.patch(f"/api/v1/jobs/{exp}", json={"priority": 1}, headers=bob)
    assert r.status_code == 403


@pytest.mark.parametrize("app", [TWO_POOLS], indirect=True)
def test_moving_pools_preempts_and_requeues(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    exp = submit(client, auth)["experiment"]["id"]
    spec = start_one(app, client)
    r = client.patch(f"/api/v1/jobs/{exp}", json={"resource_pool": "nowhere"}, headers=auth)
    assert r.status_code == 400 and "unknown resource pool" in r.json["error"]["message"]
    r = client.patch(f"/api/v1/jobs/{exp}", json={"resource_pool": "big"}, headers=auth)
    assert r.status_code == 200
    tauth, alloc = trial_auth(spec), spec["allocation_id"]
    pre = client.get(f"/api/v1/allocations/{alloc}/preemption?timeout=0", headers=tauth).json
    assert pre == {"preempt": True}
    poll(client, [{"id": alloc, "state": "EXITED", "exit_code": 0}])
    assert schedule(app) == 0  # no agent in "big" yet
    jobs = queue(client, auth, "big")
    assert jobs[0]["reason"] == "no agents in resource pool 'big'"
    body = {"protocol": PROTOCOL_VERSION, "resource_pool": "big", "slots": [{"index": 0}]}
    client.post(
        "/api/v1/agents/b1/poll", json=body, headers={"Authorization": "Bearer agent-secret"}
    )
    assert schedule(app) == 1


def test_metric_series_are_downsampled_on_the_master(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    submit(client, auth)
    spec = start_one(app, client)
    tid = spec["trial_id"]
    reports = [
        {
            "group": "training",
            "steps_completed": s,
            "metrics": {"loss": 1.0 if s != 777 else 50.0, "lr": 0.1, "note": "x"},
        }
        for s in range(1, 2001)
    ]
    client.post(
        f"/api/v1/trials/{tid}/metrics", json={"reports": reports}, headers=trial_auth(spec)
    )
    names = client.get(f"/api/v1/trials/{tid}/metric-names", headers=auth).json
    assert names == {"training": ["loss", "lr", "note"], "validation": []}
    r = client.get(f"/api/v1/trials/{tid}/metric-series?names=loss,lr&max_points=100", headers=auth)
    body = r.json
    assert body["downsampled"] is True
    loss = body["series"]["loss"]
    assert len(loss["steps"]) <= 100 and loss["steps"] == sorted(loss["steps"])
    assert 50.0 in loss["values"], "min/max buckets keep the spike"
    full = client.get(f"/api/v1/trials/{tid}/metric-series?names=note", headers=auth).json
    assert full["series"]["note"] == {"steps": [], "values": []}  # numbers only
    r = client.get(f"/api/v1/trials/{tid}/metric-series", headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "names"
