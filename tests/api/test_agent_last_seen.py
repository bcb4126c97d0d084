"""An agent is seen when its long poll ends, not only when it began: `agent_timeout` counts from
its last contact (a long poll used to make it look silent for up to half the timeout)."""

from __future__ import annotations

import time
from datetime import UTC

from flask import Flask
from flask.testing import FlaskClient

from detlab.protocol import PROTOCOL_VERSION
from master.db import db
from master.models import Agent
from master.services.agent import heartbeats
from tests.api.conftest import AGENT, poll


def test_last_seen_is_stamped_when_a_long_poll_ends(app: Flask, client: FlaskClient) -> None:
    poll(client)  # registers a1
    body = {
        "protocol": PROTOCOL_VERSION,
        "resource_pool": "default",
        "slots": [{"index": 0, "type": "cpu"}],
        "allocations": [],
        "wait": 2.0,
    }
    started = time.time()
    r = client.post("/api/v1/agents/a1/poll", json=body, headers=AGENT)
    ended = time.time()
    assert r.status_code == 200 and r.json["actions"] == []
    assert ended - started >= 1.9  # it did wait: nothing to do
    with app.app_context():
        heartbeats.flush()
        seen = db.session.get(Agent, "a1").last_seen
    seen_at = seen.replace(tzinfo=seen.tzinfo or UTC).timestamp()
    assert seen_at >= ended - 0.5, f"last seen {ended - seen_at:.1f}s before the poll ended"
