"""The tasks page through Flask's test client on real PostgreSQL: every task with its type, owner
and state; a command's page with its log; killing (owner or admin only, commands only)."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import login, poll, schedule
from tests.web.conftest import make_user, signed_in, submit


def test_tasks_page_lists_opens_and_kills(app: Flask, client: FlaskClient) -> None:
    admin = login(client)
    bob = make_user(client, admin, "bob")
    submit(client, admin)
    body = {"config": {"entrypoint": "echo hi", "description": "greeter"}}
    cmd = client.post("/api/v1/commands", json=body, headers=bob).json["command"]["id"]
    poll(client, slots=2)
    assert schedule(app) == 2

    browser = signed_in(app)
    page = browser.get("/tasks")
    assert page.status_code == 200
    assert f'data-task="{cmd}"' in page.text and "greeter" in page.text
    assert '"task-type">command<' in page.text and '"task-type">trial<' in page.text
    assert ">bob<" in page.text
    only = browser.get("/tasks?type=command").text
    assert f'data-task="{cmd}"' in only and '"task-type">trial<' not in only
    assert browser.get("/tasks?type=bogus").status_code == 400

    # The command's page shows what the master wrote to its log (its scheduling).
    own = browser.get(f"/tasks/{cmd}")
    assert own.status_code == 200 and "scheduled on agent a1" in own.text
    assert 'data-action="kill"' in own.text
    trial_task = client.get("/api/v1/tasks?type=TRIAL", headers=admin).json["tasks"][0]
    r = browser.get(f"/tasks/{trial_task['id']}")
    assert r.status_code == 302 and f"/trials/{trial_task['trial_id']}" in r.headers["Location"]
    assert browser.get("/tasks/nope").status_code == 404

    # Another user may not kill it; a trial's task is killed from its experiment.
    make_user(client, admin, "eve")
    eve = signed_in(app, "eve", "eve-password")
    assert 'data-action="kill"' not in eve.get(f"/tasks/{cmd}").text
    r = eve.post(f"/tasks/{cmd}/kill", data={"csrf_token": eve.csrf})  # type: ignore[attr-defined]
    assert r.status_code == 403
    r = browser.post(f"/tasks/{trial_task['id']}/kill", data={"csrf_token": browser.csrf})  # type: ignore[attr-defined]
    assert r.status_code == 400
    r = browser.post(f"/tasks/{cmd}/kill", data={"csrf_token": browser.csrf})  # type: ignore[attr-defined]
    assert r.status_code == 302
    got = client.get(f"/api/v1/commands/{cmd}", headers=bob).json["command"]
    assert got["state"] == "STOPPING"

    # The cluster page lists the command in the pool's queue, linked to its task page.
    cluster = browser.get("/cluster").text
    assert f"/tasks/{cmd}" in cluster
