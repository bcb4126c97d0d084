"""Trials whose slots span agents: one container per agent, rendezvous, all-or-nothing exits."""

from __future__ import annotations

import threading

from flask import Flask
from flask.testing import FlaskClient

from master.db import db
from tests.api.conftest import AGENT, CONFIG, login, poll, submit, trial_auth

TWO_SLOTS = CONFIG + "resources: {slots_per_trial: 2}\n"


def schedule_across(app: Flask, placements: tuple) -> None:
    """Run the master's scheduling pass (nothing placed by hand) and check where it put trial 1:
    two one-slot agents, so the two-slot gang spans both."""
    from master.models import Allocation
    from master.services.queue.scheduling import schedule_pass
    from master.services.task.allocations import containers_of

    with app.app_context():
        schedule_pass()
        db.session.commit()
        alloc = db.session.query(Allocation).filter_by(trial_id=1).one()
        got = {agent: tuple(c.get("slots") or ()) for agent, c in containers_of(alloc).items()}
    assert got == dict(placements), got


def starts(actions: list) -> list[dict]:
    return [a["spec"] for a in actions if a["type"] == "start"]


def test_each_agent_starts_its_container_and_they_meet(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    submit(client, auth, TWO_SLOTS)
    poll(client, agent_id="a1")
    poll(client, agent_id="a2")
    schedule_across(app, (("a1", (0,)), ("a2", (0,))))
    s1 = starts(poll(client, agent_id="a1"))[0]
    s2 = starts(poll(client, agent_id="a2"))[0]
    assert (s1["env"]["DET_CONTAINER_RANK"], s2["env"]["DET_CONTAINER_RANK"]) == ("0", "1")
    assert s1["env"]["DET_NUM_CONTAINERS"] == s2["env"]["DET_NUM_CONTAINERS"] == "2"
    assert s1["allocation_id"] == s2["allocation_id"]
    alloc = s1["allocation_id"]
    results: dict[int, dict] = {}

    def meet(rank: int, spec: dict, port: int) -> None:
        c = app.test_client()
        r = c.post(
            f"/api/v1/allocations/{alloc}/rendezvous?timeout=10",
            json={"container_rank": rank, "addr": "127.0.0.1", "port": port},
            headers=trial_auth(spec),
        )
        results[rank] = r.json

    t = threading.Thread(target=meet, args=(1, s2, 0))
    t.start()
    meet(0, s1, 29555)
    t.join(10)
    assert results[0] == results[1] == {"ready": True, "addrs": ["127.0.0.1:29555", "127.0.0.1"]}
    r = client.post(
        f"/api/v1/allocations/{alloc}/rendezvous",
        json={"container_rank": 5, "addr": "x"},
        headers=trial_auth(s1),
    )
    assert r.status_code == 400 and r.json["error"]["path"] == "container_rank"


def test_one_failing_container_kills_the_others_and_the_trial_restarts(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    submit(client, auth, TWO_SLOTS)
    poll(client, agent_id="a1")
    poll(client, agent_id="a2")
    schedule_across(app, (("a1", (0,)), ("a2", (0,))))
    alloc = starts(poll(client, agent_id="a1"))[0]["allocation_id"]
    starts(poll(client, agent_id="a2"))
    poll(client, [{"id": alloc, "state": "RUNNING"}], agent_id="a1")
    poll(client, [{"id": alloc, "state": "RUNNING"}], agent_id="a2")
    poll(client, [{"id": alloc, "state": "EXITED", "exit_code": 1}], agent_id="a2")
    actions = poll(client, [{"id": alloc, "state": "RUNNING"}], agent_id="a1")
    assert {"type": "kill", "allocation_id": alloc} in actions
    trial = client.get("/api/v1/trials/1", headers=auth).json["trial"]
    assert trial["display_state"] == "RUNNING"  # still ending: a1's worker is being killed
    poll(client, [{"id": alloc, "state": "EXITED", "exit_code": -15}], agent_id="a1")
    trial = client.get("/api/v1/trials/1", headers=auth).json["trial"]
    assert trial["restarts"] == 1 and trial["state"] == "ACTIVE"
    logs = [x["line"] for x in client.get("/api/v1/trials/1/logs", headers=auth).json["logs"]]
    assert any("container on agent a2 exited with code 1" in line for line in logs)
    slots = [
        s for a in client.get("/api/v1/agents", headers=auth).json["agents"] for s in a["slots"]
    ]
    assert all(s["allocation_id"] is None for s in slots)


def test_trial_class_entrypoints_run_through_the_launcher(app: Flask, client: FlaskClient) -> None:
    from tests.api.conftest import schedule

    auth = login(client)
    submit(client, auth, CONFIG.replace("python3 train.py", "model_def:DigitsTrial"))
    poll(client)
    schedule(app)
    spec = starts(poll(client))[0]
    assert spec["entrypoint"] == "python3 -m harness.launch model_def:DigitsTrial"
    assert client.get("/api/v1/agents", headers=AGENT).status_code == 403
