"""The first hour's rough edges on the master side (issue 32), in-process on real PostgreSQL."""

from __future__ import annotations

import io
import tarfile
from datetime import datetime

from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import CONFIG, login, poll, start_one, submit


def model_tar(*names: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in names:
            data = b"print('hi')\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def count_experiments(client: FlaskClient, auth: dict) -> int:
    return len(client.get("/api/v1/experiments?limit=100", headers=auth).json["experiments"])


def test_an_entrypoint_naming_a_missing_file_is_refused_with_its_name(
    client: FlaskClient,
) -> None:
    auth = login(client)
    before = count_experiments(client, auth)
    typo = CONFIG.replace("python3 train.py", "python3 trian.py")
    r = submit(client, auth, typo, model_def=model_tar("train.py", "util.py"))
    assert r["status"] == 400, r
    assert r["error"]["path"] == "entrypoint"
    assert "trian.py" in r["error"]["message"] and "did you mean train.py?" in r["error"]["message"]
    trial_class = CONFIG.replace("python3 train.py", "model_def:MyTrial")
    r = submit(client, auth, trial_class, model_def=model_tar("train.py"))
    assert r["status"] == 400 and "model_def.py" in r["error"]["message"]
    assert count_experiments(client, auth) == before, "nothing was stored"
    # present files (also under ./ and a package's __init__) are accepted
    assert submit(client, auth, CONFIG, model_def=model_tar("./train.py"))["status"] == 201
    pkg = CONFIG.replace("python3 train.py", "pkg.mod:MyTrial")
    assert submit(client, auth, pkg, model_def=model_tar("pkg/mod/__init__.py"))["status"] == 201
    launcher = CONFIG.replace(
        "python3 train.py", "python3 -m harness.launch.torch_distributed -- python3 train.py"
    )
    assert submit(client, auth, launcher, model_def=model_tar("train.py"))["status"] == 201


def test_checkpoints_of_an_unknown_trial_or_experiment_are_not_found(
    client: FlaskClient,
) -> None:
    auth = login(client)
    r = client.get("/api/v1/checkpoints?trial_id=999", headers=auth)
    assert r.status_code == 404 and r.json["error"]["message"] == "trial 999 not found"
    r = client.get("/api/v1/checkpoints?experiment_id=999", headers=auth)
    assert r.status_code == 404 and r.json["error"]["message"] == "experiment 999 not found"


def test_restarts_counts_restarts_not_the_final_failure(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    config = CONFIG.replace("max_restarts: 2", "max_restarts: 1")
    exp = submit(client, auth, config)["experiment"]
    for _ in range(2):  # one restart, then out of restarts
        spec = start_one(app, client)
        poll(client, [{"id": spec["allocation_id"], "state": "EXITED", "exit_code": 1}])
    trial = client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).json["trials"][0]
    assert trial["state"] == "ERROR" and trial["restarts"] == 1
    assert trial["exit_reason"].startswith("failed 2 times")


def test_ahead_of_reports_the_priority_it_takes(client: FlaskClient) -> None:
    auth = login(client)
    first = submit(client, auth, CONFIG + "resources: {priority: 10}\n")["experiment"]["id"]
    second = submit(client, auth)["experiment"]["id"]  # priority 42
    r = client.patch(f"/api/v1/jobs/{second}", json={"ahead_of": str(first)}, headers=auth)
    assert r.status_code == 200, r.json
    assert r.json["previous_priority"] == 42 and r.json["job"]["priority"] == 10
    assert r.json["notes"] and "priority changed from 42 to 10" in r.json["notes"][0]
    r = client.patch(f"/api/v1/jobs/{second}", json={"behind_of": str(first)}, headers=auth)
    assert r.json["notes"] == [], "same priority: nothing to report"


def test_wait_counts_from_when_the_job_last_became_waiting(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    exp = submit(client, auth)["experiment"]
    jobs = client.get("/api/v1/job-queues", headers=auth).json["pools"][0]["jobs"]
    assert jobs[0]["waiting_since"] == jobs[0]["submitted_at"]
    spec = start_one(app, client)
    jobs = client.get("/api/v1/job-queues", headers=auth).json["pools"][0]["jobs"]
    assert jobs[0]["state"] == "SCHEDULED" and jobs[0]["waiting_since"] is None
    # the trial fails and queues again: it has waited since then, not since submission
    poll(client, [{"id": spec["allocation_id"], "state": "EXITED", "exit_code": 1}])
    job = client.get("/api/v1/job-queues", headers=auth).json["pools"][0]["jobs"][0]
    assert job["experiment_id"] == exp["id"] and job["state"] == "QUEUED"
    since = datetime.fromisoformat(job["waiting_since"])
    assert since > datetime.fromisoformat(job["submitted_at"])
