"""A task's `--context` through the REST API, the test playing agent and task (issue 38): the
archive is checked when it arrives (413 over the limit, 400 corrupt or hostile, nothing stored
either way), the task is started through the launcher with a token of its own, and only that
token reads the archive back, until its allocation ends."""

from __future__ import annotations

import io
import json
import os
import tarfile
from typing import Any

import psycopg2
import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import AGENT, login, poll, schedule
from tests.unit.test_task_context_unpack import tar_of

LIMIT = 64 * 1024


def start(client: FlaskClient, auth: dict, route: str, context: bytes, config: Any = None) -> Any:
    config = {"entrypoint": ["cat", "data.txt"]} if config is None else config
    data = {"config": json.dumps(config), "context": (io.BytesIO(context), "context.tar.gz")}
    return client.post(
        f"/api/v1/{route}", data=data, headers=auth, content_type="multipart/form-data"
    )


def add_user(client: FlaskClient, admin: dict, name: str) -> dict:
    body = {"username": name, "password": f"{name}-password"}
    assert client.post("/api/v1/users", json=body, headers=admin).status_code == 201
    return login(client, name, f"{name}-password")


def stored(pg_url: str) -> tuple[int, int]:
    """(tasks, context chunks) in the database."""
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM tasks")
        tasks = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM task_context_chunks")
        return tasks, cur.fetchone()[0]


def started_specs(app: Flask, client: FlaskClient, n: int) -> dict[str, dict]:
    """Schedule `n` queued tasks on agent a1 (n slots); their start specs by task id."""
    poll(client, slots=n)
    assert schedule(app) == n
    specs = [a["spec"] for a in poll(client, slots=n) if a["type"] == "start"]
    assert len(specs) == n
    return {s["env"]["DET_TASK_ID"]: s for s in specs}


def test_only_the_tasks_own_token_reads_its_context(app: Flask, client: FlaskClient) -> None:
    admin = login(client)
    bob = add_user(client, admin, "bob")
    archive = tar_of(("f", "data.txt", "forty-two")).getvalue()
    mine = start(client, admin, "commands", archive)
    assert mine.status_code == 201, mine.json
    mine_id = mine.json["command"]["id"]
    theirs = start(client, bob, "shells", tar_of(("f", "b.txt", "bob's")).getvalue(), {})
    assert theirs.status_code == 201, theirs.json
    plain = client.post("/api/v1/notebooks", json={"config": {}}, headers=bob)
    assert plain.status_code == 201

    specs = started_specs(app, client, 3)
    spec = specs[mine_id]
    # Run through the launcher, with a token of its allocation and the archive's digest.
    assert spec["entrypoint"] == ["python3", "-m", "harness.task_context", "--", "cat", "data.txt"]
    token = {"Authorization": f"Bearer {spec['env']['DET_SESSION_TOKEN']}"}
    other_task = {
        "Authorization": f"Bearer {specs[theirs.json['shell']['id']]['env']['DET_SESSION_TOKEN']}"
    }
    # A task without a context runs as it always did: no launcher, no token.
    plain_spec = specs[plain.json["notebook"]["id"]]
    assert "harness.task_context" not in plain_spec["entrypoint"]
    assert "DET_SESSION_TOKEN" not in plain_spec["env"]

    r = client.get(f"/api/v1/tasks/{mine_id}/context", headers=token)
    assert r.status_code == 200 and r.data == archive
    assert r.headers["X-Content-SHA256"] == spec["env"]["DET_TASK_CONTEXT_SHA256"]
    url = f"/api/v1/tasks/{mine_id}/context"
    # Another task's token, another user, even the owner's login and the agent: 403.
    for who in (other_task, bob, admin, AGENT):
        assert client.get(url, headers=who).status_code == 403
    assert client.get(url).status_code == 401
    # Its token does not open other tasks' data either (a trial's routes, the other context).
    theirs_url = f"/api/v1/tasks/{theirs.json['shell']['id']}/context"
    assert client.get(theirs_url, headers=token).status_code == 403
    assert client.get("/api/v1/trials/1", headers=token).status_code == 403
    assert client.get("/api/v1/experiments/1/model_def", headers=token).status_code == 403

    # The allocation ends: its token is revoked.
    poll(client, [{"id": spec["allocation_id"], "state": "EXITED", "exit_code": 0}], slots=3)
    assert client.get(url, headers=token).status_code == 401


@pytest.mark.parametrize("route", ["commands", "notebooks", "shells"])
@pytest.mark.parametrize(
    ("archive", "why"),
    [
        (b"\x1f\x8b\x08\x00 definitely not gzip", "not a readable .tar.gz"),
        (tar_of(("f", "a", "x" * 5000)).getvalue()[:-6], "not a readable .tar.gz"),  # cut short
        (tar_of(("f", "../../etc/cron.d/evil", "x")).getvalue(), "leaves the directory"),
        (tar_of(("f", "/etc/evil", "x")).getvalue(), "absolute path"),
        (tar_of(("l", "escape", "../../../")).getvalue(), "outside the directory"),
        (tar_of(("l", "escape", "/root")).getvalue(), "absolute path"),
        (tar_of(("c", "dev", "")).getvalue(), "device file"),
    ],
    # Named ids: a gzip header carries its time, so ids made of the bytes differ between two
    # xdist workers that collect a second apart ("Different tests were collected").
    ids=["not-gzip", "cut-short", "dot-dot", "absolute", "link-dot-dot", "link-absolute", "device"],
)
def test_a_corrupt_or_hostile_context_is_a_400_and_stores_nothing(
    client: FlaskClient, pg_url: str, route: str, archive: bytes, why: str
) -> None:
    admin = login(client)
    r = start(client, admin, route, archive, {} if route != "commands" else None)
    assert r.status_code == 400, r.json
    assert why in r.json["error"]["message"] and r.json["error"]["path"] == "context"
    assert stored(pg_url) == (0, 0)


@pytest.mark.parametrize("app", [{"max_model_def_bytes": LIMIT}], indirect=True)
def test_a_context_over_the_limit_is_a_413_naming_it(client: FlaskClient, pg_url: str) -> None:
    admin = login(client)
    big = tar_of(("f", "big.bin", os.urandom(2 * LIMIT))).getvalue()  # random: incompressible
    assert len(big) > LIMIT
    # Within the request limit (LIMIT + 1 MiB for the form), over the archive's own: the
    # service refuses it while storing, and rolls the task back with its chunks.
    r = start(client, admin, "commands", big)
    assert r.status_code == 413, r.json
    assert f"{LIMIT:,} bytes" in r.json["error"]["message"]
    assert stored(pg_url) == (0, 0)
    # Over the request limit: refused before the body is read.
    huge = big + os.urandom(2 * 1024 * 1024)
    r = start(client, admin, "notebooks", huge, {})
    assert r.status_code == 413 and "task context uploads" in r.json["error"]["message"]
    assert stored(pg_url) == (0, 0)
    # One just under the limit is fine.
    ok = start(client, admin, "commands", tar_of(("f", "ok", "x" * 1000)).getvalue())
    assert ok.status_code == 201
    assert stored(pg_url) == (1, 1)


def test_determineds_json_files_and_a_missing_config_are_named(client: FlaskClient) -> None:
    admin = login(client)
    body = {"config": {"entrypoint": "ls"}, "files": [{"path": "a", "content": "eA=="}]}
    r = client.post("/api/v1/commands", json=body, headers=admin)
    assert r.status_code == 400 and r.json["error"]["path"] == "files"
    r = client.post(
        "/api/v1/shells",
        data={"context": (io.BytesIO(tar_of().getvalue()), "c.tar.gz")},
        headers=admin,
        content_type="multipart/form-data",
    )
    assert r.status_code == 400 and r.json["error"]["path"] == "config"
    r = client.post(
        "/api/v1/shells",
        data={"config": "{not json", "context": (io.BytesIO(tar_of().getvalue()), "c.tar.gz")},
        headers=admin,
        content_type="multipart/form-data",
    )
    assert r.status_code == 400 and r.json["error"]["path"] == "config"
    # An empty archive is a context with nothing in it.
    assert start(client, admin, "shells", tar_of().getvalue(), {}).status_code == 201
    assert tarfile.is_tarfile(io.BytesIO(tar_of().getvalue()))
