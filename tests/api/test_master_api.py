"""The master's REST API and state machines, in-process (Flask test client) on real PostgreSQL.

The agent and the trial are played by the test: it polls as an agent would and calls the harness
routes with the allocation's session token.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from master.db import db, utcnow
from master.models import Agent, Metric
from tests.api.conftest import (
    AGENT,
    CONFIG,
    login,
    poll,
    schedule,
    start_one,
    submit,
    trial_auth,
)


def test_health_is_open_and_everything_else_needs_a_token(client: FlaskClient) -> None:
    assert client.get("/api/v1/health").json["status"] == "ok"
    r = client.get("/api/v1/experiments")
    assert r.status_code == 401 and r.json["error"]["code"] == "unauthenticated"
    r = client.get("/api/v1/experiments", headers={"Authorization": "Bearer nonsense"})
    assert r.status_code == 401
    r = client.post("/api/v1/auth/login", json={"username": "admin", "password": "wrong"})
    assert r.status_code == 401 and "wrong username or password" in r.json["error"]["message"]


def test_logout_revokes_the_token(client: FlaskClient) -> None:
    auth = login(client)
    assert client.get("/api/v1/me", headers=auth).json["user"]["username"] == "admin"
    assert client.post("/api/v1/auth/logout", headers=auth).status_code == 200
    assert client.get("/api/v1/me", headers=auth).status_code == 401


def test_agents_cannot_use_user_routes_and_users_cannot_poll(client: FlaskClient) -> None:
    auth = login(client)
    assert client.get("/api/v1/experiments", headers=AGENT).status_code == 403
    r = client.post("/api/v1/agents/a1/poll", json={"slots": []}, headers=auth)
    assert r.status_code == 403


def test_an_agent_of_another_protocol_is_told_so(client: FlaskClient) -> None:
    for body, spoken in (({"slots": []}, "an older protocol"), ({"protocol": 1}, "protocol 1")):
        r = client.post("/api/v1/agents/a1/poll", json=body, headers=AGENT)
        assert r.status_code == 400
        assert r.json["error"]["path"] == "protocol"
        assert spoken in r.json["error"]["message"]
        assert "run a det-agent of the master's version" in r.json["error"]["message"]


def test_bad_configs_name_the_bad_field(client: FlaskClient) -> None:
    auth = login(client)
    r = submit(client, auth, CONFIG.replace("max_length", "max_lenght"))
    assert r["status"] == 400
    assert r["error"]["path"] == "searcher.max_lenght"
    assert "max_length" in r["error"]["message"]
    r = submit(client, auth, CONFIG + "resources: {resource_pool: gpus}\n")
    assert r["status"] == 400 and r["error"]["path"] == "resources.resource_pool"
    assert "unknown resource pool 'gpus'" in r["error"]["message"]
    r = submit(client, auth, "name: [unclosed\n")
    assert r["status"] == 400 and r["error"]["code"] == "validation"
    r = submit(client, auth, "")
    assert r["status"] == 400


def test_a_sampler_this_master_cannot_run_is_refused_up_front(client: FlaskClient) -> None:
    """sampler gp on a master without PyTorch: a 400 naming the field, not a failed search."""
    config = (
        "name: gp-test\nentrypoint: python3 train.py\n"
        "hyperparameters: {lr: {type: double, minval: 0, maxval: 1}}\n"
        "searcher: {name: adaptive_asha, metric: loss, max_length: {batches: 100}, "
        "max_trials: 4, sampler: gp}\n"
    )
    auth = login(client)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
        r = submit(client, auth, config)
    assert r["status"] == 400 and r["error"]["path"] == "searcher.sampler"
    assert "sampler gp needs PyTorch" in r["error"]["message"]
    assert submit(client, auth, config)["status"] == 201


def test_model_def_over_the_limit_is_refused(app: Flask, client: FlaskClient) -> None:
    app.config["DET"].max_model_def_bytes = 1000
    r = submit(client, login(client), model_def=os.urandom(2000))
    assert r["status"] == 413 and "limit" in r["error"]["message"]


def test_full_lifecycle_metrics_checkpoint_and_completion(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    exp = submit(client, auth, model_def=b"tarball")["experiment"]
    spec = start_one(app, client)
    assert spec["env"]["DET_EXPERIMENT_ID"] == str(exp["id"])
    assert spec["env"]["DET_LATEST_CHECKPOINT"] == ""
    tauth = trial_auth(spec)
    tid = spec["trial_id"]
    # The trial may fetch its model definition, but not other experiments'.
    assert (
        client.get(f"/api/v1/experiments/{exp['id']}/model_def", headers=tauth).data == b"tarball"
    )
    assert (
        client.get(f"/api/v1/experiments/{exp['id']}/model_def", headers=AGENT).status_code == 200
    )
    op = client.get(f"/api/v1/trials/{tid}/searcher/operation", headers=tauth).json
    assert op == {"operation": {"length": 100}, "completed": False}
    reports = [
        {"group": "training", "steps_completed": s, "metrics": {"loss": 1.0 / s}}
        for s in range(1, 101)
    ] + [{"group": "validation", "steps_completed": 100, "metrics": {"loss": 0.25}}]
    r = client.post(f"/api/v1/trials/{tid}/metrics", json={"reports": reports}, headers=tauth)
    assert r.json == {"accepted": 101}
    r = client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": "2f1e0c4e-27a4-4b0e-9a71-0a7c6b4d8d11",
            "trial_id": tid,
            "steps_completed": 100,
            "metadata": {"steps_completed": 100},
            "resources": {"model.pt": 10, "opt.pt": 5},
        },
        headers=tauth,
    )
    assert r.status_code == 201 and r.json["checkpoint"]["size"] == 15
    assert r.json["checkpoint"]["storage"]["path"].endswith("2f1e0c4e-27a4-4b0e-9a71-0a7c6b4d8d11")
    r = client.post(
        f"/api/v1/trials/{tid}/searcher/completed_operation",
        json={"length": 100, "searcher_metric": 0.25},
        headers=tauth,
    )
    assert r.status_code == 200, r.json
    assert client.get(f"/api/v1/trials/{tid}/searcher/operation", headers=tauth).json == {
        "operation": None,
        "completed": True,
    }
    d = client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).json
    assert d["experiment"]["state"] == "STOPPING_COMPLETED"
    assert d["trials"][0]["display_state"] == "RUNNING"  # finishing its last operation
    poll(client, [{"id": spec["allocation_id"], "state": "EXITED", "exit_code": 0}])
    d = client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).json
    assert d["experiment"]["state"] == "COMPLETED"
    assert d["experiment"]["progress"] == 1.0
    assert d["experiment"]["best_validation"] == 0.25
    alone = client.get(f"/api/v1/experiments/{exp['id']}?trials=false", headers=auth).json
    assert alone == {"experiment": d["experiment"], "rung_lengths": [100]}
    assert alone["experiment"]["num_trials"] == 1
    # the list shows the same experiment as the description (its trials counted, not loaded)
    listed = client.get("/api/v1/experiments?state=completed", headers=auth).json
    assert listed["total"] == 1 and listed["experiments"] == [d["experiment"]]
    bad = client.get("/api/v1/experiments?state=SLEEPING", headers=auth)
    assert bad.status_code == 400 and "unknown state 'SLEEPING'" in bad.json["error"]["message"]
    t = d["trials"][0]
    assert (t["state"], t["steps_completed"], t["latest_checkpoint"]) == (
        "COMPLETED",
        100,
        "2f1e0c4e-27a4-4b0e-9a71-0a7c6b4d8d11",
    )
    assert t["latest_validation"] == {"steps_completed": 100, "loss": 0.25}
    m = client.get(f"/api/v1/trials/{tid}/metrics?group=training", headers=auth).json["metrics"]
    assert [x["steps_completed"] for x in m] == list(range(1, 101))
    # The allocation is over: its session token no longer works.
    r = client.post(f"/api/v1/trials/{tid}/metrics", json={"reports": []}, headers=tauth)
    assert r.status_code == 401
    # Nothing is left running, the slot is free again.
    agents = client.get("/api/v1/agents", headers=auth).json["agents"]
    assert agents[0]["slots"][0]["allocation_id"] is None


def test_session_token_only_touches_its_own_trial(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    submit(client, auth)
    submit(client, auth)
    poll(client, slots=2)
    assert schedule(app) == 2
    specs = [a["spec"] for a in poll(client, slots=2) if a["type"] == "start"]
    a, b = specs
    r = client.post(
        f"/api/v1/trials/{b['trial_id']}/metrics", json={"reports": []}, headers=trial_auth(a)
    )
    assert r.status_code == 403 and "belongs to trial" in r.json["error"]["message"]
    r = client.get(
        f"/api/v1/allocations/{b['allocation_id']}/preemption?timeout=0", headers=trial_auth(a)
    )
    assert r.status_code == 403
    r = client.post(f"/api/v1/experiments/{b['experiment_id']}/kill", headers=trial_auth(a))
    assert r.status_code == 403


def test_metric_batch_validation_names_the_report(app: Flask, client: FlaskClient) -> None:
    submit(client, login(client))
    spec = start_one(app, client)
    bad = [
        {"group": "training", "steps_completed": 1, "metrics": {}},
        {"group": "oops", "steps_completed": 2, "metrics": {}},
    ]
    r = client.post(
        f"/api/v1/trials/{spec['trial_id']}/metrics",
        json={"reports": bad},
        headers=trial_auth(spec),
    )
    assert r.status_code == 400 and r.json["error"]["path"] == "reports[1].group"
    with app.app_context():
        assert db.session.query(Metric).count() == 0  # nothing of a rejected batch is stored


def test_pause_preempts_then_activate_resumes_from_checkpoint(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    exp = submit(client, auth)["experiment"]
    spec = start_one(app, client)
    tauth, alloc = trial_auth(spec), spec["allocation_id"]
    assert client.get(f"/api/v1/allocations/{alloc}/preemption?timeout=0", headers=tauth).json == {
        "preempt": False
    }
    assert client.post(f"/api/v1/experiments/{exp['id']}/pause", headers=auth).status_code == 200
    assert client.get(f"/api/v1/allocations/{alloc}/preemption?timeout=5", headers=tauth).json == {
        "preempt": True
    }
    ck = "9b2d7c1a-0d4f-4a8e-b1c2-3d4e5f6a7b8c"
    client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": ck,
            "trial_id": spec["trial_id"],
            "steps_completed": 40,
            "metadata": {"steps_completed": 40},
        },
        headers=tauth,
    )
    poll(client, [{"id": alloc, "state": "EXITED", "exit_code": 0}])
    d = client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).json
    assert d["experiment"]["state"] == "PAUSED" and d["trials"][0]["state"] == "PAUSED"
    assert schedule(app) == 0  # paused work is not scheduled
    r = client.post(f"/api/v1/experiments/{exp['id']}/pause", headers=auth)
    assert r.status_code == 409 and "only ACTIVE" in r.json["error"]["message"]
    assert client.post(f"/api/v1/experiments/{exp['id']}/activate", headers=auth).status_code == 200
    spec2 = start_one(app, client)
    assert spec2["env"]["DET_LATEST_CHECKPOINT"] == ck
    assert spec2["allocation_id"] != alloc


def test_failures_restart_until_max_restarts_then_error(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    exp = submit(client, auth)["experiment"]
    for attempt in range(3):  # max_restarts: 2 -> three attempts in all
        spec = start_one(app, client)
        assert spec["env"]["DET_TRIAL_RESTARTS"] == str(attempt)
        poll(client, [{"id": spec["allocation_id"], "state": "EXITED", "exit_code": 3}])
    d = client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).json
    assert d["trials"][0]["state"] == "ERROR"
    assert d["trials"][0]["restarts"] == 2  # three attempts: two restarts
    assert d["experiment"]["state"] == "ERROR"
    lines = [
        x["line"]
        for x in client.get(f"/api/v1/trials/{spec['trial_id']}/logs", headers=auth).json["logs"]
    ]
    assert any("restart 1 of 2" in line for line in lines)
    assert any("max_restarts=2 reached" in line for line in lines)


def test_kill_stops_the_running_trial(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    exp = submit(client, auth)["experiment"]
    spec = start_one(app, client)
    assert client.post(f"/api/v1/experiments/{exp['id']}/kill", headers=auth).status_code == 200
    actions = poll(client, [{"id": spec["allocation_id"], "state": "RUNNING"}])
    assert {"type": "kill", "allocation_id": spec["allocation_id"]} in actions
    poll(client, [{"id": spec["allocation_id"], "state": "EXITED", "exit_code": -15}])
    d = client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).json
    assert d["experiment"]["state"] == "CANCELED" and d["trials"][0]["state"] == "CANCELED"
    r = client.post(f"/api/v1/experiments/{exp['id']}/activate", headers=auth)
    assert r.status_code == 409


def test_lost_agent_fails_its_allocations_and_the_trial_moves(
    app: Flask, client: FlaskClient
) -> None:
    from master.services.agent.agents import reap_lost_agents

    auth = login(client)
    exp = submit(client, auth)["experiment"]
    spec = start_one(app, client, agent_id="a1")
    poll(client, agent_id="a2")
    with app.app_context():
        from master.services.agent import heartbeats

        heartbeats.flush()  # a1's last poll (stamped when it ended), then five silent minutes
        db.session.get(Agent, "a1").last_seen = utcnow() - timedelta(minutes=5)
        db.session.commit()
        reap_lost_agents()
    agents = {
        a["id"]: a["state"] for a in client.get("/api/v1/agents", headers=auth).json["agents"]
    }
    assert agents == {"a1": "LOST", "a2": "ACTIVE"}
    assert schedule(app) == 1
    starts = [a for a in poll(client, agent_id="a2") if a["type"] == "start"]
    assert starts and starts[0]["spec"]["trial_id"] == spec["trial_id"]
    d = client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).json
    assert d["trials"][0]["restarts"] == 1
    # The lost agent comes back still running the old allocation: it is told to kill it.
    actions = poll(client, [{"id": spec["allocation_id"], "state": "RUNNING"}], agent_id="a1")
    assert {"type": "kill", "allocation_id": spec["allocation_id"]} in actions


def test_logs_keep_order_and_follow_with_after(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    submit(client, auth)
    spec = start_one(app, client)
    lines = [
        {"allocation_id": spec["allocation_id"], "stream": "stdout", "line": f"line {i}"}
        for i in range(50)
    ]
    r = client.post("/api/v1/agents/a1/logs", json={"logs": lines}, headers=AGENT)
    assert r.json == {"accepted": 50}
    page = client.get(f"/api/v1/trials/{spec['trial_id']}/logs", headers=auth).json
    own = [x for x in page["logs"] if x["stream"] == "stdout"]
    assert [x["line"] for x in own] == [f"line {i}" for i in range(50)]
    seqs = [x["seq"] for x in page["logs"]]
    assert seqs == sorted(seqs)
    after = own[24]["seq"]
    rest = client.get(f"/api/v1/trials/{spec['trial_id']}/logs?after={after}", headers=auth).json
    assert [x["line"] for x in rest["logs"]] == [f"line {i}" for i in range(25, 50)]
    empty = client.get(
        f"/api/v1/trials/{spec['trial_id']}/logs?after={page['last_seq']}&follow=true&timeout=0.2",
        headers=auth,
    ).json
    assert empty["logs"] == [] and empty["done"] is False


def test_agent_log_tail_is_the_newest_output_lines_of_its_own(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    submit(client, auth)
    spec = start_one(app, client)
    aid = spec["allocation_id"]
    lines = [
        {
            "allocation_id": aid,
            "stream": "stdout" if i % 2 else "stderr",
            "line": f"line {i}",
            "timestamp": f"2026-11-21T10:00:00.{i:06d}Z",
        }
        for i in range(10)
    ]
    assert client.post("/api/v1/agents/a1/logs", json={"logs": lines}, headers=AGENT).json == {
        "accepted": 10
    }
    url = f"/api/v1/agents/a1/allocations/{aid}/logs"
    tail = client.get(f"{url}?limit=3", headers=AGENT).json["logs"]
    assert tail == [
        {"stream": "stdout", "timestamp": "2026-11-21T10:00:00.000007Z", "line": "line 7"},
        {"stream": "stderr", "timestamp": "2026-11-21T10:00:00.000008Z", "line": "line 8"},
        {"stream": "stdout", "timestamp": "2026-11-21T10:00:00.000009Z", "line": "line 9"},
    ]
    assert len(client.get(url, headers=AGENT).json["logs"]) == 10  # the master's lines left out
    other = client.get(f"/api/v1/agents/a2/allocations/{aid}/logs", headers=AGENT)
    assert other.status_code == 200 and other.json["logs"] == []
    missing = client.get("/api/v1/agents/a1/allocations/nope/logs", headers=AGENT)
    assert missing.status_code == 404 and "nope" in missing.json["error"]["message"]
    bad = client.get(f"{url}?limit=0", headers=AGENT)
    assert bad.status_code == 400 and "limit must be between 1 and 5000" in bad.text
    assert client.get(url, headers=auth).status_code in (401, 403)  # agents only


def test_only_owner_or_admin_may_steer(app: Flask, client: FlaskClient) -> None:
    admin = login(client)
    r = client.post(
        "/api/v1/users", json={"username": "alice", "password": "alice-password"}, headers=admin
    )
    assert r.status_code == 201
    client.post(
        "/api/v1/users", json={"username": "bob", "password": "bob-password"}, headers=admin
    )
    alice, bob = login(client, "alice", "alice-password"), login(client, "bob", "bob-password")
    exp = submit(client, alice)["experiment"]
    r = client.post(f"/api/v1/experiments/{exp['id']}/pause", headers=bob)
    assert r.status_code == 403 and "belongs to alice" in r.json["error"]["message"]
    assert client.post(f"/api/v1/experiments/{exp['id']}/pause", headers=alice).status_code == 200
    assert (
        client.post(f"/api/v1/experiments/{exp['id']}/activate", headers=admin).status_code == 200
    )
    r = client.post(
        "/api/v1/users", json={"username": "eve", "password": "eve-password"}, headers=bob
    )
    assert r.status_code == 403
    r = client.post("/api/v1/users", json={"username": "carol", "password": "short"}, headers=admin)
    assert r.status_code == 400 and r.json["error"]["path"] == "password"


def test_metrics_are_strict_json_and_nan_travels_as_a_string(
    app: Flask, client: FlaskClient
) -> None:
    submit(client, login(client))
    spec = start_one(app, client)
    url, tauth = f"/api/v1/trials/{spec['trial_id']}/metrics", trial_auth(spec)
    raw = b'{"reports": [{"group": "training", "steps_completed": 1, "metrics": {"loss": NaN}}]}'
    r = client.post(url, data=raw, headers={**tauth, "Content-Type": "application/json"})
    assert r.status_code == 400 and "finite number" in r.json["error"]["message"]
    assert r.json["error"]["path"] == "reports[0].metrics.loss"  # issue 37: named like elsewhere
    ok = {
        "group": "training",
        "steps_completed": 1,
        "metrics": {"loss": "NaN", "nested": {"a": [1]}},
    }
    assert client.post(url, json={"reports": [ok]}, headers=tauth).json == {"accepted": 1}
    bad_ts = dict(ok, reported_at="yesterday")
    r = client.post(url, json={"reports": [bad_ts]}, headers=tauth)
    assert r.status_code == 400 and r.json["error"]["path"] == "reports[0].reported_at"
    got = client.get(url, headers=login(client)).json["metrics"]
    assert got[0]["metrics"] == {"loss": "NaN", "nested": {"a": [1]}}
    r = client.post(
        f"/api/v1/trials/{spec['trial_id']}/searcher/completed_operation",
        json={"length": 100, "searcher_metric": "NaN"},
        headers=tauth,
    )
    assert r.status_code == 200


def test_a_retried_metrics_batch_is_stored_once(app: Flask, client: FlaskClient) -> None:
    submit(client, login(client))
    spec = start_one(app, client)
    url, tauth = f"/api/v1/trials/{spec['trial_id']}/metrics", trial_auth(spec)
    body = {
        "batch_id": "b-1",
        "reports": [
            {"group": "training", "steps_completed": s, "metrics": {"x": s}} for s in (1, 2)
        ],
    }
    assert client.post(url, json=body, headers=tauth).json == {"accepted": 2}
    assert client.post(url, json=body, headers=tauth).json == {"accepted": 2}  # the retry
    got = client.get(url, headers=login(client)).json["metrics"]
    assert [m["steps_completed"] for m in got] == [1, 2]
    r = client.post(url, json={"batch_id": "x" * 65, "reports": []}, headers=tauth)
    assert r.status_code == 400 and r.json["error"]["path"] == "batch_id"


def test_search_preview_creates_nothing_and_describe_gives_rung_lengths(
    client: FlaskClient,
) -> None:
    auth = login(client)
    asha = CONFIG.replace(
        "searcher: {name: single, metric: loss, max_length: {batches: 100}}",
        "searcher: {name: adaptive_asha, metric: loss, max_length: {batches: 64}, "
        "max_trials: 16, divisor: 4, max_rungs: 3, mode: aggressive}\n"
        "hyperparameters: {lr: {type: double, minval: 0.01, maxval: 0.1}}",
    ).replace("hyperparameters: {lr: 0.1}\n", "")
    r = client.post("/api/v1/experiments/preview", json={"config": asha}, headers=auth)
    assert r.status_code == 200, r.json
    preview = r.json["preview"]
    assert preview["searcher"] == "adaptive_asha" and preview["trials"] == 16
    assert [rung["length"] for rung in preview["rungs"]] == [4, 16, 64]
    assert client.get("/api/v1/experiments", headers=auth).json["total"] == 0
    bad = client.post("/api/v1/experiments/preview", json={"config": ""}, headers=auth)
    assert bad.status_code == 400 and bad.json["error"]["path"] == "config"
    typo = asha.replace("max_trials", "max_trails")
    r = client.post("/api/v1/experiments/preview", json={"config": typo}, headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "searcher.max_trails"
    exp = submit(client, auth, asha)["experiment"]
    described = client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).json
    assert described["rung_lengths"] == [4, 16, 64]


def test_agents_listing_is_one_service_with_a_fixed_number_of_queries(
    app: Flask, client: FlaskClient
) -> None:
    """The API and the cluster page read one service; its statements do not grow per agent."""
    from sqlalchemy import event

    from master.services.agent.agent_listing import list_agents
    from master.services.agent.cluster_view import agents_overview

    auth = login(client)

    def statements() -> tuple[int, list[dict]]:
        seen: list[str] = []
        with app.app_context():

            def count(*args: object) -> None:
                seen.append(str(args[2]))

            event.listen(db.engine, "before_cursor_execute", count)
            try:
                out = list_agents()
            finally:
                event.remove(db.engine, "before_cursor_execute", count)
        return len([s for s in seen if s.lstrip().upper().startswith("SELECT")]), out

    submit(client, auth)
    first = start_one(app, client, agent_id="a1")
    one, _ = statements()
    specs = [first]
    for agent_id in ("a2", "a3", "a4"):
        submit(client, auth)
        specs.append(start_one(app, client, agent_id=agent_id))
    four, listed = statements()
    assert one == four <= 3, (one, four)
    held = {a["id"]: a["slots"][0]["trial_id"] for a in listed}
    assert held == {f"a{i + 1}": s["trial_id"] for i, s in enumerate(specs)}
    api = client.get("/api/v1/agents", headers=auth).json["agents"]
    with app.app_context():
        page = agents_overview()
    assert api == page == listed
