"""POST /experiments/ID/continue in process: what it changes, and every refusal's 4xx."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import login, submit

CONFIG = """
name: continue-api
entrypoint: python3 train.py
hyperparameters:
  lr: 0.1
  depth: {type: int, minval: 1, maxval: 4}
searcher: {name: single, metric: loss, max_length: {batches: 100}}
"""


def _cont(client: FlaskClient, auth: dict, exp_id: int, override: object = None):  # type: ignore[no-untyped-def]
    body = {} if override is None else {"override_config": override}
    return client.post(f"/api/v1/experiments/{exp_id}/continue", json=body, headers=auth)


def test_continue_reopens_the_same_trial_and_refuses_clearly(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    exp_id = submit(client, auth, CONFIG)["experiment"]["id"]
    active = _cont(client, auth, exp_id)
    assert active.status_code == 409
    assert "is ACTIVE; only COMPLETED, CANCELED or ERROR" in active.json["error"]["message"]
    assert client.post(f"/api/v1/experiments/{exp_id}/cancel", headers=auth).status_code == 200
    (before,) = client.get(f"/api/v1/experiments/{exp_id}/trials", headers=auth).json["trials"]
    assert before["state"] == "CANCELED"

    for override, path in [
        ("searcher: {name: random, metric: loss, max_trials: 1}", "searcher.name"),
        ("hyperparameters: {depth: {type: int, minval: 1, maxval: 8}}", "hyperparameters.depth"),
        ("[1, 2]", ""),
    ]:
        r = _cont(client, auth, exp_id, override)
        assert r.status_code == 400, (override, r.json)
        assert r.json["error"].get("path", "") == path, r.json
    assert _cont(client, auth, exp_id, 7).status_code == 400
    assert _cont(client, auth, 99999).status_code == 404

    r = _cont(client, auth, exp_id, "hyperparameters: {lr: 0.5}\nsearcher: {max_length: 300}")
    assert r.status_code == 200, r.json
    assert r.json["experiment"]["state"] == "ACTIVE" and r.json["experiment"]["ended_at"] is None
    (after,) = client.get(f"/api/v1/experiments/{exp_id}/trials", headers=auth).json["trials"]
    assert after["id"] == before["id"] and after["state"] == "ACTIVE"
    assert after["hparams"] == {**before["hparams"], "lr": 0.5}  # depth keeps its sampled value
    assert after["searcher_target"] == 300 and after["restarts"] == 0
    with app.app_context():
        from master.models import Task
        from master.services.transitions import history

        assert [(c.from_state, c.to_state) for c in history("experiment", exp_id)][-1] == (
            "CANCELED",
            "ACTIVE",
        )
        task = Task.query.filter_by(trial_id=before["id"]).one()
        assert task.state == "ACTIVE" and task.ended_at is None

    client.post(f"/api/v1/experiments/{exp_id}/cancel", headers=auth)
    client.patch(f"/api/v1/experiments/{exp_id}", json={"archived": True}, headers=auth)
    archived = _cont(client, auth, exp_id)
    assert archived.status_code == 409 and "archived" in archived.json["error"]["message"]
