"""Commands in the job queue and in the provisioner's count, in-process on real PostgreSQL: a
command is a job of its own, ordered with experiments as the scheduler orders them, and the
provisioner launches cloud agents for a queue that holds only commands."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from master.config import ResourcePoolConfig
from master.provisioner.decision import PoolLimits, decide
from tests.api.conftest import CONFIG, login, poll, schedule, submit

FAIR = {
    "resource_pools": [ResourcePoolConfig("default", scheduler={"type": "fair_share"})],
}


def command(client: FlaskClient, auth: dict, priority: int = 42, slots: int = 1) -> str:
    resources = {"priority": priority, "slots": slots}
    body = {"config": {"entrypoint": "sleep 60", "resources": resources}}
    r = client.post("/api/v1/commands", json=body, headers=auth)
    assert r.status_code == 201, r.json
    return str(r.json["command"]["id"])


def jobs(client: FlaskClient, auth: dict) -> list[dict]:
    r = client.get("/api/v1/job-queues?pool=default", headers=auth)
    assert r.status_code == 200, r.json
    return list(r.json["pools"][0]["jobs"])


def test_commands_are_jobs_ordered_with_experiments(app: Flask, client: FlaskClient) -> None:
    admin = login(client)
    exp = submit(client, admin)["experiment"]["id"]
    urgent = command(client, admin, priority=10)
    later = command(client, admin)
    poll(client, slots=1)
    assert schedule(app) == 1  # one slot: the priority-10 command wins it

    listed = jobs(client, admin)
    assert [j["job_id"] for j in listed] == [urgent, str(exp), later]
    assert [j["type"] for j in listed] == ["COMMAND", "EXPERIMENT", "COMMAND"]
    assert [j["position"] for j in listed] == [1, 2, 3]
    first, _, last = listed
    assert (first["state"], first["slots_held"], first["task_id"]) == ("SCHEDULED", 1, urgent)
    assert first["user"] == "admin" and first["experiment_id"] is None
    assert (last["state"], last["slots_requested"]) == ("QUEUED", 1)
    assert last["reason"] == "waiting for 1 free slot(s)" and last["waiting_since"]

    # A command's request is fixed at submission: steering it is a 400 that says so.
    r = client.patch(f"/api/v1/jobs/{later}", json={"priority": 1}, headers=admin)
    assert r.status_code == 400 and "not an experiment" in r.json["error"]["message"]
    assert client.patch("/api/v1/jobs/nope", json={}, headers=admin).status_code == 404

    # A killed command leaves the queue.
    assert client.post(f"/api/v1/commands/{later}/kill", headers=admin).status_code == 200
    assert [j["job_id"] for j in jobs(client, admin)] == [urgent, str(exp)]


@pytest.mark.parametrize("app", [FAIR], indirect=True)
def test_fair_share_lists_commands_too(app: Flask, client: FlaskClient) -> None:
    admin = login(client)
    exp = submit(client, admin, CONFIG)["experiment"]["id"]
    cmd = command(client, admin)
    listed = jobs(client, admin)
    assert sorted(j["job_id"] for j in listed) == sorted([str(exp), cmd])
    assert [j["position"] for j in listed] == [1, 2]


def test_the_provisioner_counts_queued_commands(app: Flask, client: FlaskClient) -> None:
    from master.services.queue.scheduling import pending_requests

    admin = login(client)
    cmd = command(client, admin, slots=2)
    with app.app_context():
        pending = pending_requests("default")
    assert [(r.id, r.slots) for r in pending] == [(cmd, 2)]
    # Only a command waits, and it is sized like any other request: one 2-slot instance.
    out = decide(PoolLimits(max_instances=3, instance_slots=2), [], pending, now=0.0)
    assert (out.launch, out.unfit) == (1, {})


def test_a_running_command_does_not_hide_queued_trials(app: Flask, client: FlaskClient) -> None:
    """A command's allocation has no trial: the queued-trials query once read its NULL in a NOT IN
    list and so found no queued trial at all while any command ran."""
    admin = login(client)
    command(client, admin, priority=10)
    poll(client, slots=2)
    assert schedule(app) == 1  # the command
    submit(client, admin)
    assert schedule(app) == 1  # the trial, on the second slot
    states = [j["state"] for j in jobs(client, admin)]
    assert states == ["SCHEDULED", "SCHEDULED"]
