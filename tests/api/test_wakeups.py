"""Long polls are woken once the change they wait for is committed, never before it.

A poll woken before the commit re-reads the old rows and answers "nothing yet"; its next poll
then waits on a version that has already moved, and hears the change only at its timeout. In a
whole-suite run that let a paused trial train 1,650 more batches to its end (its preemption
poll waits 30 s) and end COMPLETED instead of PAUSED.
"""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from master.db import db
from master.models import Allocation
from master.notify import agent_key, hub, logs_key, preempt_key
from master.rm.registry import resource_manager
from master.services.task.allocations import request_preemption
from master.services.trial.logs import write_master_line
from tests.api.conftest import login, start_one, submit, trial_auth


def test_a_preemption_wakes_the_trials_poll_only_once_committed(
    app: Flask, client: FlaskClient
) -> None:
    submit(client, login(client))
    spec = start_one(app, client)
    alloc_id = spec["allocation_id"]
    key = preempt_key(alloc_id)
    with app.app_context():
        seen = hub().version(key)
        alloc = db.session.get(Allocation, alloc_id)
        assert alloc is not None and request_preemption(alloc, alloc.trial_id)
        assert hub().version(key) == seen  # a poll woken now would read preempt=False
        db.session.commit()
        assert hub().version(key) > seen
    r = client.get(f"/api/v1/allocations/{alloc_id}/preemption?timeout=0", headers=trial_auth(spec))
    assert r.json == {"preempt": True}


def test_a_kill_wakes_the_agents_poll_only_once_committed(app: Flask, client: FlaskClient) -> None:
    submit(client, login(client))
    spec = start_one(app, client)
    key = agent_key("a1")
    with app.app_context():
        seen = hub().version(key)
        alloc = db.session.get(Allocation, spec["allocation_id"])
        assert alloc is not None
        resource_manager("default").kill(alloc)
        assert hub().version(key) == seen  # the agent would read no kill and wait again
        db.session.commit()
        assert hub().version(key) > seen


def test_a_rolled_back_change_wakes_nobody_until_the_next_commit(
    app: Flask, client: FlaskClient
) -> None:
    submit(client, login(client))
    spec = start_one(app, client)
    key = preempt_key(spec["allocation_id"])
    with app.app_context():
        seen = hub().version(key)
        alloc = db.session.get(Allocation, spec["allocation_id"])
        assert alloc is not None and request_preemption(alloc, alloc.trial_id)
        db.session.rollback()
        assert hub().version(key) == seen
    r = client.get(
        f"/api/v1/allocations/{spec['allocation_id']}/preemption?timeout=0",
        headers=trial_auth(spec),
    )
    assert r.json == {"preempt": False}


def test_a_masters_line_in_a_transition_wakes_log_followers_once_committed(
    app: Flask, client: FlaskClient
) -> None:
    """`det trial logs -f` (and det-tui) follow by long poll: woken before the commit, a
    follower read no new line and waited for the next one."""
    auth = login(client)
    submit(client, auth)
    spec = start_one(app, client)
    key = logs_key(spec["trial_id"])
    with app.app_context():
        seen = hub().version(key)
        alloc = db.session.get(Allocation, spec["allocation_id"])
        write_master_line(spec["trial_id"], alloc, "a line written inside a transition")
        assert hub().version(key) == seen
        db.session.commit()
        assert hub().version(key) > seen
    lines = client.get(f"/api/v1/trials/{spec['trial_id']}/logs", headers=auth).json["logs"]
    assert any(e["line"].endswith("a line written inside a transition") for e in lines)
