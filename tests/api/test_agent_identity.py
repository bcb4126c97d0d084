"""Per-agent credentials and users' linked agent users, through the master's routes (in-process
master, real PostgreSQL): a credential acts as its own agent alone, the join token stops acting
as an agent once that agent holds one, and start specs say whose task it is."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from detlab.protocol import PROTOCOL_VERSION
from tests.api.conftest import AGENT, login, schedule, submit

BODY = {
    "protocol": PROTOCOL_VERSION,
    "resource_pool": "default",
    "slots": [{"index": 0, "type": "cpu"}],
    "allocations": [],
    "wait": 0,
}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def issue(client: FlaskClient, agent_id: str, auth: dict = AGENT) -> str:
    r = client.post(f"/api/v1/agents/{agent_id}/credential", headers=auth)
    assert r.status_code == 201, r.json
    assert r.json["agent_id"] == agent_id
    return str(r.json["credential"])


def test_a_credential_acts_as_its_own_agent_alone(client: FlaskClient) -> None:
    one = issue(client, "one")
    two = issue(client, "two")
    assert client.post("/api/v1/agents/one/poll", json=BODY, headers=bearer(one)).status_code == 200
    for route, body in (("poll", BODY), ("logs", {"logs": []}), ("credential", {})):
        r = client.post(f"/api/v1/agents/two/{route}", json=body, headers=bearer(one))
        assert r.status_code == 403, (route, r.json)
        assert "belongs to agent one" in r.json["error"]["message"]
    r = client.get("/api/v1/agents/two/allocations/x/logs", headers=bearer(one))
    assert r.status_code == 403
    # Registering as a new agent with a credential: it already has one, it needs no other.
    r = client.post("/api/v1/agents/one/credential", headers=bearer(one))
    assert r.status_code == 403 and "already holds a credential" in r.json["error"]["message"]
    assert client.post("/api/v1/agents/two/poll", json=BODY, headers=bearer(two)).status_code == 200


def test_the_join_token_stops_acting_as_an_agent_once_it_has_a_credential(
    client: FlaskClient,
) -> None:
    assert client.post("/api/v1/agents/one/poll", json=BODY, headers=AGENT).status_code == 200
    credential = issue(client, "one")
    for route, body in (("poll", BODY), ("logs", {"logs": []})):
        r = client.post(f"/api/v1/agents/one/{route}", json=body, headers=AGENT)
        assert r.status_code == 403, r.json
        assert "has its own credential" in r.json["error"]["message"]
        assert "det agent reset-credential one" in r.json["error"]["message"]
    # Presenting the join token again does not hand out another credential.
    r = client.post("/api/v1/agents/one/credential", headers=AGENT)
    assert r.status_code == 409 and "reset-credential one" in r.json["error"]["message"]
    # An admin resets it: the old credential is dead at once, the join token may join again.
    admin = login(client)
    assert client.delete("/api/v1/agents/one/credential", headers=AGENT).status_code == 403
    assert client.delete("/api/v1/agents/one/credential", headers=admin).status_code == 200
    r = client.post("/api/v1/agents/one/poll", json=BODY, headers=bearer(credential))
    assert r.status_code == 401, r.json
    fresh = issue(client, "one")
    assert fresh != credential
    assert (
        client.post("/api/v1/agents/one/poll", json=BODY, headers=bearer(fresh)).status_code == 200
    )
    assert client.delete("/api/v1/agents/nobody/credential", headers=admin).status_code == 404


def test_users_and_trials_tokens_cannot_get_credentials(client: FlaskClient) -> None:
    admin = login(client)
    r = client.post("/api/v1/agents/one/credential", headers=admin)
    assert r.status_code == 403
    assert client.post("/api/v1/agents/one/credential").status_code == 401
    r = client.post("/api/v1/agents/one/credential", headers=bearer("detagent-made-up"))
    assert r.status_code == 401 and "unknown agent credential" in r.json["error"]["message"]


def test_link_with_agent_user_and_what_start_specs_say(app: Flask, client: FlaskClient) -> None:
    admin = login(client)
    r = client.post(
        "/api/v1/users", json={"username": "alice", "password": "pw-alice-123"}, headers=admin
    )
    alice_id = r.json["user"]["id"]
    alice = login(client, "alice", "pw-alice-123")
    link = {"agent_uid": 1234, "agent_gid": 1235, "agent_user": "alice", "agent_group": "lab"}
    r = client.put("/api/v1/users/alice/agent-user-group", json=link, headers=alice)
    assert r.status_code == 403, "only an admin links users to Unix users"
    for bad, path in (
        ({**link, "agent_uid": -1}, "agent_uid"),
        ({**link, "agent_gid": "x"}, "agent_gid"),
        ({**link, "agent_user": "a b"}, "agent_user"),
        ({k: v for k, v in link.items() if k != "agent_group"}, "agent_group"),
    ):
        r = client.put("/api/v1/users/alice/agent-user-group", json=bad, headers=admin)
        assert r.status_code == 400 and r.json["error"]["path"] == path, r.json
    r = client.put("/api/v1/users/alice/agent-user-group", json=link, headers=admin)
    assert r.status_code == 200 and r.json["user"]["agent_user_group"] == link

    assert submit(client, alice)["status"] == 201
    assert submit(client, admin)["status"] == 201
    client.post(
        "/api/v1/agents/a1/poll",
        json={**BODY, "slots": [{"index": 0, "type": "cpu"}, {"index": 1, "type": "cpu"}]},
        headers=AGENT,
    )
    assert schedule(app) == 2
    r = client.post(
        "/api/v1/agents/a1/poll",
        json=BODY | {"slots": [{"index": 0, "type": "cpu"}, {"index": 1, "type": "cpu"}]},
        headers=AGENT,
    )
    users = {a["spec"]["user"]["username"]: a["spec"]["user"] for a in r.json["actions"]}
    assert users["alice"] == {
        "user_id": alice_id,
        "username": "alice",
        "uid": 1234,
        "gid": 1235,
        "unix_user": "alice",
        "unix_group": "lab",
    }
    assert users["admin"]["uid"] is None and users["admin"]["gid"] is None, "derived by agents"

    r = client.delete("/api/v1/users/alice/agent-user-group", headers=admin)
    assert r.status_code == 200 and "agent_user_group" not in r.json["user"]


DEFAULT = {"agent_uid": 4000, "agent_gid": 4001, "agent_user": "det", "agent_group": "det"}


@pytest.mark.parametrize("app", [{"agent_user_group": DEFAULT}], indirect=True)
def test_the_agent_user_group_default_covers_unlinked_users(
    app: Flask, client: FlaskClient
) -> None:
    admin = login(client)
    assert submit(client, admin)["status"] == 201
    client.post("/api/v1/agents/a1/poll", json=BODY, headers=AGENT)
    assert schedule(app) == 1
    r = client.post("/api/v1/agents/a1/poll", json=BODY, headers=AGENT)
    (start,) = r.json["actions"]
    assert start["spec"]["user"]["uid"] == 4000 and start["spec"]["user"]["unix_user"] == "det"


def test_a_bad_agent_user_group_default_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from master.config import MasterConfigError, load_master_config

    cfg = tmp_path / "master.yaml"
    cfg.write_text("agent_user_group: {agent_uid: 5, agent_gid: 5, agent_user: det}\n")
    with pytest.raises(MasterConfigError, match="agent_user_group: agent_group is required"):
        load_master_config(cfg)
