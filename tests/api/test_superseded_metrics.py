"""A trial restored from a checkpoint re-does the steps after it: what its earlier run reported
past that checkpoint is superseded (kept for audit, hidden from reads, series and best metrics),
so no step is counted twice."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import login, poll, start_one, submit, trial_auth

CKPT = "6a0f3b7e-2c1d-4e8f-9b0a-1c2d3e4f5a6b"


def _report(client: FlaskClient, spec: dict, steps: range, val: dict[int, float]) -> None:
    reports = [
        {"group": "training", "steps_completed": s, "metrics": {"loss": 10.0 - s / 10}}
        for s in steps
    ] + [
        {"group": "validation", "steps_completed": s, "metrics": {"loss": v}}
        for s, v in val.items()
    ]
    r = client.post(
        f"/api/v1/trials/{spec['trial_id']}/metrics",
        json={"reports": reports},
        headers=trial_auth(spec),
    )
    assert r.status_code == 200, r.json


def test_metrics_past_the_restored_checkpoint_are_superseded(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    exp_id = submit(client, auth)["experiment"]["id"]
    first = start_one(app, client)
    tid = first["trial_id"]
    # Run 1: steps 1-30, a checkpoint at 20, validations at 20 (0.5) and 30 (0.1), then it dies.
    _report(client, first, range(1, 31), {20: 0.5, 30: 0.1})
    r = client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": CKPT,
            "trial_id": tid,
            "steps_completed": 20,
            "metadata": {"steps_completed": 20},
            "resources": {"model.pt": 1},
        },
        headers=trial_auth(first),
    )
    assert r.status_code == 201
    d = client.get(f"/api/v1/experiments/{exp_id}", headers=auth).json
    assert d["experiment"]["best_validation"] == 0.1
    poll(client, [{"id": first["allocation_id"], "state": "EXITED", "exit_code": 1}])

    # Run 2 resumes from the checkpoint: steps 21-30 of run 1 are superseded at once.
    second = start_one(app, client)
    assert second["env"]["DET_LATEST_CHECKPOINT"] == CKPT
    t = client.get(f"/api/v1/trials/{tid}", headers=auth).json["trial"]
    assert t["steps_completed"] == 20
    assert t["best_validation"] == 0.5 and t["latest_validation"]["steps_completed"] == 20
    assert (
        client.get(f"/api/v1/experiments/{exp_id}", headers=auth).json["experiment"][
            "best_validation"
        ]
        == 0.5
    )
    seen = client.get(f"/api/v1/trials/{tid}/metrics?group=training", headers=auth).json
    assert [m["steps_completed"] for m in seen["metrics"]] == list(range(1, 21))

    # Run 2 re-does 21-30 (worse this time): every step appears once, the new value wins.
    _report(client, second, range(21, 31), {30: 0.3})
    seen = client.get(f"/api/v1/trials/{tid}/metrics", headers=auth).json["metrics"]
    steps = [(m["group"], m["steps_completed"]) for m in seen]
    assert len(steps) == len(set(steps)) == 32  # 30 training + 2 validation, no duplicates
    val = [m for m in seen if m["group"] == "validation"]
    assert [(m["steps_completed"], m["metrics"]["loss"]) for m in val] == [(20, 0.5), (30, 0.3)]
    series = client.get(
        f"/api/v1/trials/{tid}/metric-series?group=validation&names=loss", headers=auth
    ).json["series"]["loss"]
    assert series == {"steps": [20, 30], "values": [0.5, 0.3]}
    d = client.get(f"/api/v1/experiments/{exp_id}", headers=auth).json
    assert d["experiment"]["best_validation"] == 0.3  # not run 1's superseded 0.1
    assert d["trials"][0]["restarts"] == 1

    # Kept for audit: the superseded rows are there, marked.
    audit = client.get(f"/api/v1/trials/{tid}/metrics?superseded=true", headers=auth).json
    old = [m for m in audit["metrics"] if m["superseded"]]
    assert len(old) == 11  # run 1's training 21-30 and its validation at 30
    assert {m["steps_completed"] for m in old} == set(range(21, 31))
    assert any(m["metrics"] == {"loss": 0.1} for m in old)


def test_a_restart_without_a_checkpoint_supersedes_everything(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    submit(client, auth)
    first = start_one(app, client)
    _report(client, first, range(1, 6), {5: 0.2})
    poll(client, [{"id": first["allocation_id"], "state": "EXITED", "exit_code": 1}])
    second = start_one(app, client)
    tid = second["trial_id"]
    assert client.get(f"/api/v1/trials/{tid}/metrics", headers=auth).json["metrics"] == []
    t = client.get(f"/api/v1/trials/{tid}", headers=auth).json["trial"]
    assert t["best_validation"] is None and t["latest_validation"] is None
    assert t["steps_completed"] == 0


def test_long_chart_series_leave_superseded_rows_out(app: Flask, client: FlaskClient) -> None:
    """The web's PostgreSQL paths for long series (sampled, exact envelope, names) too."""
    from master.services.trial.chart_series import EXACT_ROWS, chart_metric_names, chart_series

    auth = login(client)
    submit(client, auth)
    first = start_one(app, client)
    tid = first["trial_id"]
    n = EXACT_ROWS + 1000
    r = client.post(
        f"/api/v1/trials/{tid}/metrics",
        json={
            "reports": [
                {"group": "training", "steps_completed": s, "metrics": {"old": 1000.0}}
                for s in range(1, n + 1)
            ]
        },
        headers=trial_auth(first),
    )
    assert r.status_code == 200
    poll(client, [{"id": first["allocation_id"], "state": "EXITED", "exit_code": 1}])
    second = start_one(app, client)  # no checkpoint: all of run 1 is superseded
    r = client.post(
        f"/api/v1/trials/{tid}/metrics",
        json={
            "reports": [
                {"group": "training", "steps_completed": s, "metrics": {"loss": float(s % 7)}}
                for s in range(1, n + 1)
            ]
        },
        headers=trial_auth(second),
    )
    assert r.status_code == 200
    with app.app_context():
        sampled, how = chart_series(tid, "training", ["loss", "old"], 200)
        assert how == "sampled" and sampled["old"]["steps"] == []
        assert sampled["loss"]["steps"] and max(sampled["loss"]["values"]) <= 6
        exact, how = chart_series(tid, "training", ["loss", "old"], 200, exact=True)
        assert how == "minmax" and exact["old"]["steps"] == []
        assert set(exact["loss"]["values"]) <= {float(v) for v in range(7)}
        assert chart_metric_names(tid)["training"] == ["loss"]
