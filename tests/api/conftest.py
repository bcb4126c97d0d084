"""Fixtures and helpers for in-process master API tests: the test plays agent and trial."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from detlab.protocol import PROTOCOL_VERSION
from master.config import MasterConfig
from master.db import db

AGENT = {"Authorization": "Bearer agent-secret"}
CONFIG = """
name: api-test
entrypoint: python3 train.py
hyperparameters: {lr: 0.1}
searcher: {name: single, metric: loss, max_length: {batches: 100}}
max_restarts: 2
"""


@pytest.fixture
def app(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Flask]:
    """The master app; parametrize it indirectly with a dict to override MasterConfig fields."""
    from master.app import create_app, prepare_database

    monkeypatch.setenv("DET_AGENT_TOKEN", "agent-secret")
    monkeypatch.setenv("DET_ADMIN_PASSWORD", "admin-password")
    overrides = dict(getattr(request, "param", {}) or {})
    cfg = MasterConfig(db=pg_url, data_dir=tmp_path / "data", agent_timeout=30, **overrides)
    app = create_app(cfg)
    prepare_database(app)
    yield app
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def login(client: FlaskClient, user: str = "admin", pw: str = "admin-password") -> dict:
    r = client.post("/api/v1/auth/login", json={"username": user, "password": pw})
    assert r.status_code == 200, r.json
    return {"Authorization": f"Bearer {r.json['token']}"}


def submit(client: FlaskClient, auth: dict, config: str = CONFIG, **kw: Any) -> dict:
    data = {"config": config}
    if "model_def" in kw:
        data["model_def"] = (io.BytesIO(kw["model_def"]), "model.tar.gz")
    r = client.post(
        "/api/v1/experiments", data=data, headers=auth, content_type="multipart/form-data"
    )
    return {"status": r.status_code, **(r.json or {})}


def poll(
    client: FlaskClient, allocations: list | None = None, agent_id: str = "a1", slots: int = 1
) -> list:
    body = {
        "protocol": PROTOCOL_VERSION,
        "resource_pool": "default",
        "slots": [{"index": i, "type": "cpu"} for i in range(slots)],
        "allocations": allocations or [],
        "wait": 0,
    }
    r = client.post(f"/api/v1/agents/{agent_id}/poll", json=body, headers=AGENT)
    assert r.status_code == 200, r.json
    return r.json["actions"]


def schedule(app: Flask) -> int:
    from master.services.queue.scheduling import schedule_pass

    with app.app_context():
        return schedule_pass()


def start_one(app: Flask, client: FlaskClient, agent_id: str = "a1") -> dict:
    poll(client, agent_id=agent_id)
    assert schedule(app) == 1
    actions = poll(client, agent_id=agent_id)
    starts = [a for a in actions if a["type"] == "start"]
    assert len(starts) == 1, actions
    spec = starts[0]["spec"]
    poll(client, [{"id": spec["allocation_id"], "state": "RUNNING"}], agent_id=agent_id)
    return spec


def trial_auth(spec: dict) -> dict:
    return {"Authorization": f"Bearer {spec['env']['DET_SESSION_TOKEN']}"}
