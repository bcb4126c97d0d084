"""Who may write what: trials' own tokens, agents' own allocations, revocation, login throttling
and look-alike usernames. In-process master on real PostgreSQL.

Every route's expected answer for every kind of caller is in test_route_permissions.py; these
tests check the effects (nothing stored, the state unchanged, the log line written).
"""

from __future__ import annotations

import logging

import pytest
from flask import Flask
from flask.testing import FlaskClient

from master.login_throttle import ThrottleLimits
from tests.api.conftest import AGENT, login, poll, start_one, submit, trial_auth
from tests.web.conftest import csrf_of


def _user(client: FlaskClient, by: dict, name: str, **kw: object) -> dict:
    r = client.post(
        "/api/v1/users",
        json={"username": name, "password": f"{name}-password", **kw},
        headers=by,
    )
    assert r.status_code == 201, r.json
    return login(client, name, f"{name}-password")


def test_no_user_writes_into_a_trial_not_even_its_owner_or_an_admin(
    app: Flask, client: FlaskClient
) -> None:
    """The issue's attack: another user completed a never-run trial's searcher operation."""
    admin = login(client)
    alice, mallory = _user(client, admin, "alice"), _user(client, admin, "mallory")
    exp = submit(client, alice)["experiment"]
    tid = client.get(f"/api/v1/experiments/{exp['id']}", headers=alice).json["trials"][0]["id"]
    writes = [
        (f"/api/v1/trials/{tid}/metrics", {"reports": [_report(1)]}),
        (f"/api/v1/trials/{tid}/progress", {"progress": 0.9}),
        (
            f"/api/v1/trials/{tid}/searcher/completed_operation",
            {"length": 100, "searcher_metric": 1},
        ),
        (f"/api/v1/trials/{tid}/early_exit", {"reason": "INVALID_HP"}),
    ]
    for who in (mallory, alice, admin):
        for url, body in writes:
            r = client.post(url, json=body, headers=who)
            assert r.status_code == 403, (url, r.json)
            assert f"only trial {tid}'s own session token" in r.json["error"]["message"]
    trial = client.get(f"/api/v1/trials/{tid}", headers=alice).json["trial"]
    assert trial["state"] == "ACTIVE" and trial["best_validation"] is None
    assert not trial["searcher_completed"] and not trial["progress"]
    assert client.get(f"/api/v1/trials/{tid}/metrics", headers=alice).json["metrics"] == []
    e = client.get(f"/api/v1/experiments/{exp['id']}?trials=false", headers=alice).json
    assert e["experiment"]["state"] == "ACTIVE" and e["experiment"]["progress"] in (None, 0, 0.0)


def test_only_the_allocation_acknowledges_preemption_or_posts_its_rendezvous(
    app: Flask, client: FlaskClient
) -> None:
    admin = login(client)
    submit(client, admin)
    submit(client, admin)
    spec = start_one(app, client)
    other = start_one(app, client, agent_id="a2")
    alloc = spec["allocation_id"]
    body = {"container_rank": 0, "addr": "10.6.6.6", "port": 6666}
    for who in (admin, trial_auth(other), AGENT):
        for url in (f"/api/v1/allocations/{alloc}/ack_preemption",):
            assert client.post(url, headers=who).status_code == 403
        r = client.post(f"/api/v1/allocations/{alloc}/rendezvous?timeout=0", json=body, headers=who)
        assert r.status_code == 403, r.json
    with app.app_context():
        from master.context import master_state

        assert master_state().rendezvous.addresses(alloc) == {}  # nothing was injected
    mine = trial_auth(spec)
    assert (
        client.post(f"/api/v1/allocations/{alloc}/ack_preemption", headers=mine).status_code == 200
    )
    r = client.post(f"/api/v1/allocations/{alloc}/rendezvous?timeout=0", json=body, headers=mine)
    assert r.status_code == 200 and r.json == {"ready": True, "addrs": ["10.6.6.6:6666"]}


def _report(step: int) -> dict:
    return {"group": "training", "steps_completed": step, "metrics": {"loss": 1.0}}


def test_an_agent_writes_log_lines_only_for_allocations_it_runs(
    app: Flask, client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    admin = login(client)
    submit(client, admin)
    spec = start_one(app, client, agent_id="a1")
    poll(client, agent_id="a2")  # another agent of the cluster, same cluster token
    alloc, tid = spec["allocation_id"], spec["trial_id"]
    forged = {"allocation_id": alloc, "stream": "stdout", "line": "loss=0.0 (forged)"}
    mine = {"allocation_id": alloc, "stream": "stdout", "line": "step 1"}
    with caplog.at_level(logging.WARNING):
        r = client.post("/api/v1/agents/a2/logs", json={"logs": [forged]}, headers=AGENT)
    assert r.status_code == 200 and r.json["accepted"] == 0
    assert f"agent a2 sent log lines for allocation {alloc} it does not run" in caplog.text
    r = client.post("/api/v1/agents/a1/logs", json={"logs": [mine]}, headers=AGENT)
    assert r.json["accepted"] == 1
    lines = [
        x["line"] for x in client.get(f"/api/v1/trials/{tid}/logs", headers=admin).json["logs"]
    ]
    assert "step 1" in lines and "loss=0.0 (forged)" not in lines
    # Cached by now: a2 is still refused, a1 still accepted.
    r = client.post("/api/v1/agents/a2/logs", json={"logs": [forged, mine]}, headers=AGENT)
    assert r.json["accepted"] == 0


def test_an_agent_reports_only_on_allocations_it_runs(app: Flask, client: FlaskClient) -> None:
    """A poll's report about another agent's allocation changes nothing (nor kills it)."""
    admin = login(client)
    submit(client, admin)
    spec = start_one(app, client, agent_id="a1")
    alloc, tid = spec["allocation_id"], spec["trial_id"]
    poll(client, [{"id": alloc, "state": "EXITED", "exit_code": 1}], agent_id="a2")
    trial = client.get(f"/api/v1/trials/{tid}", headers=admin).json["trial"]
    assert trial["display_state"] == "RUNNING" and trial["allocation_id"] == alloc
    assert trial["restarts"] == 0
    # a1 still runs it: reporting it RUNNING gets no kill.
    actions = poll(client, [{"id": alloc, "state": "RUNNING"}], agent_id="a1")
    assert not [a for a in actions if a["type"] == "kill"]


def test_deactivating_a_user_takes_effect_on_the_very_next_request(
    app: Flask, client: FlaskClient
) -> None:
    admin = login(client)
    alice = _user(client, admin, "alice", admin=True)
    assert client.get("/api/v1/me", headers=alice).status_code == 200  # her token is cached now
    r = client.patch("/api/v1/users/alice", json={"admin": False}, headers=admin)
    assert r.status_code == 200
    r = client.post("/api/v1/users", json={"username": "eve", "password": "x" * 8}, headers=alice)
    assert r.status_code == 403  # demoted at once, not a few seconds later
    assert client.patch("/api/v1/users/alice", json={"active": False}, headers=admin).json
    r = client.get("/api/v1/me", headers=alice)
    assert r.status_code == 401 and "deactivated" in r.json["error"]["message"]


def test_a_lookup_racing_a_revocation_does_not_cache_the_old_rights(app: Flask) -> None:
    """A request that read the token row just before a deactivation must not re-cache it."""
    from master.auth import Principal, TokenCache

    cache = TokenCache()
    p = Principal(kind="user", user_id=7, username="alice")
    generation = cache.generation  # the lookup starts, reads the database...
    cache.evict_user(7)  # ...the deactivation commits and evicts...
    cache.put("digest", p, generation)  # ...then the lookup finishes
    assert cache.get("digest") is None
    cache.put("digest", p, cache.generation)
    assert cache.get("digest") == p
    cache.put("short", p, cache.generation, ttl=0.0)  # a token expiring now is not cached
    assert cache.get("short") is None


def test_logout_takes_effect_on_the_very_next_request(client: FlaskClient) -> None:
    admin = login(client)
    assert client.get("/api/v1/me", headers=admin).status_code == 200
    assert client.post("/api/v1/auth/logout", headers=admin).status_code == 200
    assert client.get("/api/v1/me", headers=admin).status_code == 401


LIMITS = {"login_throttle": ThrottleLimits(3, 5, window=60, lockout=120)}


def _login(client: FlaskClient, user: str, pw: str, addr: str = "127.0.0.1"):  # type: ignore[no-untyped-def]
    return client.post(
        "/api/v1/auth/login",
        json={"username": user, "password": pw},
        environ_base={"REMOTE_ADDR": addr},
    )


@pytest.mark.parametrize("app", [LIMITS], indirect=True)
def test_login_is_throttled_per_user_even_for_the_right_password(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(20):  # successes never count
        assert _login(client, "admin", "admin-password").status_code == 200
    with caplog.at_level(logging.WARNING):
        for i in range(3):
            r = _login(client, "admin", f"guess-{i}", addr=f"10.0.0.{i}")
            assert r.status_code == 401
        r = _login(client, "admin", "admin-password", addr="10.0.0.9")
    assert r.status_code == 429
    assert r.json["error"]["code"] == "too_many_requests"
    assert (
        "too many failed logins for user 'admin'; try again in 120 s" in r.json["error"]["message"]
    )
    assert 1 <= int(r.headers["Retry-After"]) <= 120
    assert "user 'admin' locked for 120 s after too many failed logins" in caplog.text
    # The web sign-in shares the throttle.
    page = client.get("/login")
    r = client.post(
        "/login",
        data={"username": "admin", "password": "admin-password", "csrf_token": csrf_of(page.text)},
        environ_base={"REMOTE_ADDR": "10.0.0.9"},
    )
    assert r.status_code == 429 and "too many failed logins" in r.text and r.headers["Retry-After"]


@pytest.mark.parametrize("app", [LIMITS], indirect=True)
def test_login_is_throttled_per_address(client: FlaskClient) -> None:
    admin = login(client)
    client.post("/api/v1/users", json={"username": "alice", "password": "alice-pw1"}, headers=admin)
    for i in range(5):  # five names, one address: no name reaches its own limit
        assert _login(client, f"user{i}", "nope", addr="10.9.9.9").status_code == 401
    r = _login(client, "alice", "alice-pw1", addr="10.9.9.9")
    assert r.status_code == 429 and "for address 10.9.9.9" in r.json["error"]["message"]
    assert _login(client, "alice", "alice-pw1", addr="10.1.1.1").status_code == 200


@pytest.mark.parametrize(
    ("name", "clash"),
    [("аdmin", "admin"), ("Admin", "admin"), ("ａｄｍｉｎ", "admin"), ("adrnin", "admin")],
)
def test_look_alike_usernames_are_refused_naming_the_existing_one(
    client: FlaskClient, name: str, clash: str
) -> None:
    admin = login(client)
    r = client.post("/api/v1/users", json={"username": name, "password": "p" * 8}, headers=admin)
    assert r.status_code == 400, r.json
    assert r.json["error"]["path"] == "username"
    assert f"can be mistaken for the existing user {clash!r}" in r.json["error"]["message"]
    names = [u["username"] for u in client.get("/api/v1/users", headers=admin).json["users"]]
    assert names == ["admin"]  # nothing stored
    r = client.post(
        "/api/v1/users", json={"username": "adminx", "password": "p" * 8}, headers=admin
    )
    assert r.status_code == 201
