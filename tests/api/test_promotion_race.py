"""A promotion made after a trial's process was told "no work", but before its exit 0 is seen,
is not swallowed by that exit (issue 42: on Kubernetes, and across a master restart, a pod's end
reaches the master late; the exit was read as "exited 0 before its operation" and the trial was
COMPLETED at a rung it never trained to)."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from master.db import db
from master.models import Allocation
from tests.api.conftest import login, poll, schedule, submit, trial_auth

ASHA = """
name: promotion-race
entrypoint: python3 train.py
hyperparameters: {lr: 0.1}
searcher:
  name: adaptive_asha
  metric: loss
  max_length: {batches: 8}
  max_trials: 2
  max_concurrent_trials: 2
  divisor: 2
  max_rungs: 2
  mode: aggressive
"""


def _op(client: FlaskClient, spec: dict) -> dict:
    r = client.get(
        f"/api/v1/trials/{spec['trial_id']}/searcher/operation", headers=trial_auth(spec)
    )
    assert r.status_code == 200, r.json
    return r.json


def _complete(client: FlaskClient, spec: dict, length: int, loss: float) -> None:
    r = client.post(
        f"/api/v1/trials/{spec['trial_id']}/searcher/completed_operation",
        json={"length": length, "searcher_metric": loss},
        headers=trial_auth(spec),
    )
    assert r.status_code == 200, r.json


def _out_of_work(app: Flask, alloc_id: str) -> bool:
    with app.app_context():
        alloc = db.session.get(Allocation, alloc_id)
        assert alloc is not None
        return alloc.out_of_work


def _trial(client: FlaskClient, auth: dict, exp_id: int, trial_id: int) -> dict:
    d = client.get(f"/api/v1/experiments/{exp_id}", headers=auth).json
    return next(t for t in d["trials"] if t["id"] == trial_id)


def test_a_promotion_made_before_the_exit_is_seen_is_still_trained(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    exp_id = submit(client, auth, ASHA)["experiment"]["id"]
    poll(client, slots=2)
    assert schedule(app) == 2
    a, b = (x["spec"] for x in poll(client, slots=2) if x["type"] == "start")
    running = [{"id": s["allocation_id"], "state": "RUNNING"} for s in (a, b)]
    poll(client, running, slots=2)
    assert _op(client, a)["operation"] == {"length": 4}
    assert _op(client, b)["operation"] == {"length": 4}

    # A reports rung 0 first: alone in its rung it cannot be promoted yet, so its process is
    # told there is no work and exits.
    _complete(client, a, 4, 0.1)
    # A user reading the operation tells the process nothing; the process's own read does.
    r = client.get(f"/api/v1/trials/{a['trial_id']}/searcher/operation", headers=auth)
    assert r.json == {"operation": None, "completed": True}
    assert not _out_of_work(app, a["allocation_id"])
    assert _op(client, a) == {"operation": None, "completed": True}
    assert _out_of_work(app, a["allocation_id"])
    # B's worse result makes A promotable before A's exit reaches the master.
    _complete(client, b, 4, 0.9)
    assert _trial(client, auth, exp_id, a["trial_id"])["searcher_target"] == 8
    poll(
        client,
        [{"id": a["allocation_id"], "state": "EXITED", "exit_code": 0}, running[1]],
        slots=2,
    )
    ta = _trial(client, auth, exp_id, a["trial_id"])
    # Before the fix: COMPLETED with searcher_completed 8, trained only to 4.
    assert (ta["state"], ta["searcher_completed"], ta["searcher_target"]) == ("ACTIVE", 4, 8)

    # It is scheduled again and gets its promotion.
    assert schedule(app) == 1
    starts = [x["spec"] for x in poll(client, [running[1]], slots=2) if x["type"] == "start"]
    assert [s["trial_id"] for s in starts] == [a["trial_id"]]
    again = starts[0]
    assert _op(client, again)["operation"] == {"length": 8}
    _complete(client, again, 8, 0.05)
    assert _op(client, again) == {"operation": None, "completed": True}
    assert _op(client, b) == {"operation": None, "completed": True}
    poll(
        client,
        [
            {"id": again["allocation_id"], "state": "EXITED", "exit_code": 0},
            {"id": b["allocation_id"], "state": "EXITED", "exit_code": 0},
        ],
        slots=2,
    )
    d = client.get(f"/api/v1/experiments/{exp_id}", headers=auth).json
    assert d["experiment"]["state"] == "COMPLETED"
    lengths = {t["id"]: t["searcher_completed"] for t in d["trials"]}
    assert lengths == {a["trial_id"]: 8, b["trial_id"]: 4}
    assert d["experiment"]["best_trial_id"] == a["trial_id"]
