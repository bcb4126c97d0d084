"""A PostgreSQL outage costs clients a retry, never a 500: the master answers 503 + Retry-After
while its database is away (connections killed and refused), and serves again once it is back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
from flask import Flask
from flask.testing import FlaskClient

from detlab.protocol import PROTOCOL_VERSION
from tests.api.conftest import AGENT, login, start_one, submit, trial_auth
from tests.cluster import pg_admin_url


def _admin(sql: str, *args: object) -> None:
    conn = psycopg2.connect(pg_admin_url())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(sql, args)
    conn.close()


@contextmanager
def database_away(url: str) -> Iterator[None]:
    """Refuse new connections to the database and kill the open ones, as a restart would."""
    name = url.rsplit("/", 1)[1]
    _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    _admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid()",
        name,
    )
    try:
        yield
    finally:
        _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def _requests(client: FlaskClient, auth: dict, spec: dict, exp_id: int) -> list:
    """What users, agents and trials send: every one must be answered while the database is
    away (with 503) or after (with 2xx)."""
    trial_id = spec["trial_id"]
    tok = trial_auth(spec)
    poll = {
        "protocol": PROTOCOL_VERSION,
        "resource_pool": "default",
        "slots": [{"index": 0, "type": "cpu"}],
        "allocations": [{"id": spec["allocation_id"], "state": "RUNNING"}],
        "wait": 0,
    }
    return [
        client.get("/api/v1/experiments", headers=auth),
        client.get(f"/api/v1/experiments/{exp_id}", headers=auth),
        client.get(f"/api/v1/trials/{trial_id}/metrics", headers=auth),
        client.post("/api/v1/auth/login", json={"username": "admin", "password": "admin-password"}),
        client.post("/api/v1/agents/a1/poll", json=poll, headers=AGENT),
        client.post(
            f"/api/v1/trials/{trial_id}/metrics",
            json={
                "batch_id": "b-outage",
                "reports": [{"group": "training", "steps_completed": 5, "metrics": {"loss": 1}}],
            },
            headers=tok,
        ),
        client.post(f"/api/v1/trials/{trial_id}/progress", json={"progress": 0.5}, headers=tok),
        client.get(f"/api/v1/trials/{trial_id}/searcher/operation", headers=tok),
    ]


def test_database_outage_answers_503_then_recovers(
    app: Flask, client: FlaskClient, pg_url: str
) -> None:
    auth = login(client)
    exp_id = submit(client, auth)["experiment"]["id"]
    spec = start_one(app, client)

    with database_away(pg_url):
        during = _requests(client, auth, spec, exp_id)
    statuses = [r.status_code for r in during]
    assert statuses == [503] * len(during), [(r.status_code, r.json) for r in during]
    for r in during:
        assert r.headers["Retry-After"].isdigit()
        assert r.json["error"]["code"] == "unavailable"

    # Back: the pool's dead connections are replaced (pre-ping) and every request succeeds,
    # the metrics batch stored once however often it was sent.
    after = _requests(client, auth, spec, exp_id)
    assert [r.status_code for r in after] == [200] * len(after), [r.json for r in after]
    again = _requests(client, auth, spec, exp_id)
    assert all(r.status_code == 200 for r in again)
    rows = client.get(f"/api/v1/trials/{spec['trial_id']}/metrics", headers=auth).json["metrics"]
    assert [m["steps_completed"] for m in rows] == [5]
