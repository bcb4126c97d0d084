"""GC and the model registry through the master's REST API (in process, PostgreSQL), with the
checkpoints' files in a real S3 bucket (moto's server). The test plays agent and trial."""

from __future__ import annotations

import json
import uuid as uuidlib
from pathlib import Path
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from harness.storage import build
from master.ckpt.gc import gc_tick, run_deletions
from master.db import db
from master.models import Checkpoint
from tests.api.conftest import login, start_one, submit, trial_auth
from tests.checkpoints.conftest import uuids_in

CONFIG = """
name: gc-test
entrypoint: python3 train.py
hyperparameters: {lr: 0.1}
searcher: {name: single, metric: loss, smaller_is_better: true, max_length: {batches: 100}}
checkpoint_storage: %s
"""


def _exp(client: FlaskClient, auth: dict, storage: dict[str, Any]) -> dict:
    r = submit(client, auth, CONFIG % json.dumps(storage))
    assert r["status"] == 201, r
    return r["experiment"]


def _checkpoint(
    client: FlaskClient, spec: dict, storage: dict, steps: int, loss: float | None, tmp: Path
) -> str:
    """Store files in the bucket, report a validation at `steps`, register the checkpoint."""
    uuid = str(uuidlib.uuid4())
    src = tmp / uuid
    src.mkdir()
    (src / "weights.bin").write_bytes(b"w" * 1000)
    backend = build(storage)
    backend.upload(src, uuid)
    tid = spec["trial_id"]
    if loss is not None:
        r = client.post(
            f"/api/v1/trials/{tid}/metrics",
            json={
                "reports": [
                    {"group": "validation", "steps_completed": steps, "metrics": {"loss": loss}}
                ]
            },
            headers=trial_auth(spec),
        )
        assert r.status_code in (200, 201), r.json
    r = client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": uuid,
            "trial_id": tid,
            "steps_completed": steps,
            "metadata": {"steps_completed": steps},
            "resources": backend.list_files(uuid),
        },
        headers=trial_auth(spec),
    )
    assert r.status_code == 201, r.json
    return uuid


def _state(app: Flask, uuid: str) -> Checkpoint:
    with app.app_context():
        c = db.session.get(Checkpoint, uuid)
        assert c is not None
        db.session.expunge(c)
        return c


def test_gc_while_running_keeps_best_latest_and_registered(
    app: Flask, client: FlaskClient, s3_storage: dict, tmp_path: Path
) -> None:
    auth = login(client)
    exp = _exp(client, auth, s3_storage)
    spec = start_one(app, client)
    losses = [0.9, 0.3, 0.5, None, 0.7]
    uuids = [
        _checkpoint(client, spec, s3_storage, 10 * (i + 1), loss, tmp_path)
        for i, loss in enumerate(losses)
    ]
    # The secret never shows in describe/config output.
    for path in (f"/api/v1/experiments/{exp['id']}", f"/api/v1/experiments/{exp['id']}/config"):
        body = client.get(path, headers=auth).get_data(as_text=True)
        assert s3_storage["secret_key"] not in body and "********" in body

    # Register the first (worst) checkpoint: the policy would delete it, the registry keeps it.
    r = client.post("/api/v1/models", json={"name": "digits", "labels": ["cv"]}, headers=auth)
    assert r.status_code == 201, r.json
    r = client.post(
        "/api/v1/models/digits/versions",
        json={"checkpointUuid": uuids[0], "comment": "first"},
        headers=auth,
    )
    assert r.status_code == 201, r.json
    v1 = r.json["model_version"]
    assert v1["version"] == 1 and v1["checkpoint"]["lineage"]["hparams"] == {"lr": 0.1}
    assert v1["checkpoint"]["lineage"]["validation_metrics"] == {"loss": 0.9}

    # Dry run: bytes freed, nothing changes.
    dry = client.get(f"/api/v1/experiments/{exp['id']}/checkpoint-gc", headers=auth).json
    assert set(dry["delete"]) == {uuids[2], uuids[3]}
    assert dry["bytes_freed"] == 2000
    assert uuids_in(s3_storage) == set(uuids)

    with app.app_context():
        gc_tick()  # while the trial still runs
    assert uuids_in(s3_storage) == {uuids[0], uuids[1], uuids[4]}
    assert _state(app, uuids[2]).state == "DELETED"
    assert _state(app, uuids[1]).state == "ACTIVE"

    # A stricter policy, dry run first (nothing kept but latest, registered and resume-from).
    dry = client.get(
        f"/api/v1/experiments/{exp['id']}/checkpoint-gc?save_trial_best=0", headers=auth
    ).json
    assert dry["delete"] == [uuids[1]] and dry["bytes_freed"] == 1000
    r = client.patch(
        f"/api/v1/experiments/{exp['id']}/gc-policy", json={"save_trial_best": 0}, headers=auth
    )
    assert r.status_code == 200, r.json
    with app.app_context():
        run_deletions()
    assert uuids_in(s3_storage) == {uuids[0], uuids[4]}
    usage = client.get(f"/api/v1/experiments/{exp['id']}/checkpoint-usage", headers=auth).json
    assert usage["count"] == 2 and usage["by_state"]["DELETED"]["count"] == 3

    # Deleting a registered checkpoint is refused; a bad policy value is a clear 400.
    r = client.delete("/api/v1/checkpoints", json={"checkpoint_uuids": [uuids[0]]}, headers=auth)
    assert r.status_code == 409 and "registered" in r.json["error"]["message"]
    r = client.patch(
        f"/api/v1/experiments/{exp['id']}/gc-policy", json={"save_trial_best": -1}, headers=auth
    )
    assert r.status_code == 400 and r.json["error"]["path"] == "save_trial_best"


def test_failed_delete_is_retried_and_reported(
    app: Flask, client: FlaskClient, s3_storage: dict, tmp_path: Path
) -> None:
    auth = login(client)
    _exp(client, auth, s3_storage)
    spec = start_one(app, client)
    old = _checkpoint(client, spec, s3_storage, 10, None, tmp_path)
    _checkpoint(client, spec, s3_storage, 20, None, tmp_path)

    # Break the storage: the experiment's config names a bucket that does not exist.
    renamed = dict(s3_storage)
    with app.app_context():
        from master.models import Experiment

        exp = db.session.query(Experiment).one()
        cfg = dict(exp.config)
        cfg["checkpoint_storage"] = dict(cfg["checkpoint_storage"], bucket="no-such-bucket")
        exp.config = cfg
        db.session.commit()
        gc_tick()
    c = _state(app, old)
    assert c.state == "DELETE_FAILED" and c.delete_attempts == 1
    assert "NoSuchBucket" in (c.state_reason or "")
    listed = client.get(f"/api/v1/checkpoints/{old}", headers=auth).json["checkpoint"]
    assert listed["state"] == "DELETE_FAILED" and "NoSuchBucket" in listed["state_reason"]
    with app.app_context():
        run_deletions()  # not due yet: backoff
    assert _state(app, old).delete_attempts == 1

    # Repair the storage and make the retry due: the next pass deletes it.
    with app.app_context():
        exp = db.session.query(Experiment).one()
        cfg = dict(exp.config)
        cfg["checkpoint_storage"] = renamed
        exp.config = cfg
        db.session.get(Checkpoint, old).next_delete_at = None
        db.session.commit()
        run_deletions()
    assert _state(app, old).state == "DELETED"
    assert old not in uuids_in(s3_storage)


def test_a_validation_after_its_checkpoint_and_an_unregistered_version_are_collected(
    app: Flask, client: FlaskClient, s3_storage: dict, tmp_path: Path
) -> None:
    """The plan changes without a checkpoint arriving or leaving: the PyTorch loop registers its
    last checkpoint before that step's validation, and a deleted model version unprotects its
    checkpoint. The periodic pass used to plan an experiment again only when its checkpoints
    changed, so both stayed in the bucket for good."""
    auth = login(client)
    _exp(client, auth, s3_storage)
    spec = start_one(app, client)
    first = _checkpoint(client, spec, s3_storage, 10, 0.5, tmp_path)
    last = _checkpoint(client, spec, s3_storage, 20, None, tmp_path)
    with app.app_context():
        gc_tick()
    assert uuids_in(s3_storage) == {first, last}  # the best and the latest

    r = client.post(
        f"/api/v1/trials/{spec['trial_id']}/metrics",
        json={
            "reports": [{"group": "validation", "steps_completed": 20, "metrics": {"loss": 0.1}}]
        },
        headers=trial_auth(spec),
    )
    assert r.status_code in (200, 201), r.json
    with app.app_context():
        gc_tick()
    assert uuids_in(s3_storage) == {last}  # now the best and the latest

    # A registered checkpoint is kept; once its version is deleted the next pass collects it.
    registered = _checkpoint(client, spec, s3_storage, 30, 0.9, tmp_path)
    client.post("/api/v1/models", json={"name": "m"}, headers=auth)
    r = client.post("/api/v1/models/m/versions", json={"checkpoint_uuid": registered}, headers=auth)
    assert r.status_code == 201, r.json
    newest = _checkpoint(client, spec, s3_storage, 40, 0.8, tmp_path)
    with app.app_context():
        gc_tick()
    assert uuids_in(s3_storage) == {last, registered, newest}
    assert client.delete("/api/v1/models/m/versions/1", headers=auth).status_code == 200
    with app.app_context():
        gc_tick()
    assert uuids_in(s3_storage) == {last, newest}


def test_experiment_delete_keeps_registered_checkpoint(
    app: Flask, client: FlaskClient, s3_storage: dict, tmp_path: Path
) -> None:
    auth = login(client)
    exp = _exp(client, auth, s3_storage)
    spec = start_one(app, client)
    a = _checkpoint(client, spec, s3_storage, 10, 0.5, tmp_path)
    b = _checkpoint(client, spec, s3_storage, 20, 0.6, tmp_path)
    client.post("/api/v1/models", json={"name": "keeper"}, headers=auth)
    client.post("/api/v1/models/keeper/versions", json={"checkpoint_uuid": a}, headers=auth)

    r = client.delete(f"/api/v1/experiments/{exp['id']}", headers=auth)
    assert r.status_code == 409 and "kill it" in r.json["error"]["message"]
    assert client.post(f"/api/v1/experiments/{exp['id']}/kill", headers=auth).status_code == 200
    with app.app_context():
        from master.models import Experiment
        from master.states import State

        e = db.session.get(Experiment, exp["id"])
        e.state = State.CANCELED.value  # the trial "exited"
        db.session.commit()
    r = client.delete(f"/api/v1/experiments/{exp['id']}", headers=auth)
    assert r.status_code == 200, r.json
    assert r.json["registered_kept"] == [a] and r.json["checkpoints_deleted"] == 1
    assert uuids_in(s3_storage) == {a}
    assert client.get(f"/api/v1/experiments/{exp['id']}", headers=auth).status_code == 404
    assert client.get(f"/api/v1/checkpoints/{b}", headers=auth).status_code == 404
    # The registered one is still described and downloadable through the master.
    c = client.get(f"/api/v1/checkpoints/{a}", headers=auth).json["checkpoint"]
    assert c["uuid"] == a and c["storage"]["bucket"] == s3_storage["bucket"]
    assert "secret_key" not in json.dumps(c)
    r = client.get(f"/api/v1/checkpoints/{a}/download", headers=auth)
    assert r.status_code == 200 and r.data[:2] == b"\x1f\x8b"
    v = client.get("/api/v1/models/keeper/versions/1", headers=auth).json["model_version"]
    assert v["checkpoint"]["uuid"] == a


def test_model_registry_rest(
    app: Flask, client: FlaskClient, s3_storage: dict, tmp_path: Path
) -> None:
    auth = login(client)
    _exp(client, auth, s3_storage)
    spec = start_one(app, client)
    u1 = _checkpoint(client, spec, s3_storage, 10, 0.5, tmp_path)
    u2 = _checkpoint(client, spec, s3_storage, 20, 0.4, tmp_path)
    assert client.post("/api/v1/models", json={"name": "m"}, headers=auth).status_code == 201
    r = client.post("/api/v1/models", json={"name": "m"}, headers=auth)
    assert r.status_code == 409
    r = client.post("/api/v1/models", json={"name": "a/b"}, headers=auth)
    assert r.status_code == 400 and r.json["error"]["path"] == "name"
    for u in (u1, u2):
        r = client.post("/api/v1/models/m/versions", json={"checkpoint_uuid": u}, headers=auth)
        assert r.status_code == 201
    r = client.post("/api/v1/models/m/versions", json={"checkpoint_uuid": "nope"}, headers=auth)
    assert r.status_code == 404
    # Aliases: unique per model, movable, every move recorded.
    r = client.put("/api/v1/models/m/aliases/production", json={"version": 1}, headers=auth)
    assert r.status_code == 200 and r.json["previous_version"] is None
    r = client.put("/api/v1/models/m/aliases/production", json={"version": 2}, headers=auth)
    assert r.json["previous_version"] == 1
    r = client.put("/api/v1/models/m/aliases/candidate", json={"version": 9}, headers=auth)
    assert r.status_code == 404
    v = client.get("/api/v1/models/m/versions/production", headers=auth).json["model_version"]
    assert v["version"] == 2 and v["checkpoint"]["uuid"] == u2 and v["aliases"] == ["production"]
    h = client.get("/api/v1/models/m/aliases", headers=auth).json
    assert h["aliases"] == {"production": 2}
    assert [(e["from_version"], e["to_version"], e["username"]) for e in h["history"]] == [
        (None, 1, "admin"),
        (1, 2, "admin"),
    ]
    # Patch, archive (read-only), list, delete a version.
    r = client.patch("/api/v1/models/m", json={"description": "d", "labels": ["x"]}, headers=auth)
    assert r.json["model"]["description"] == "d"
    assert client.post("/api/v1/models/m/archive", headers=auth).json["model"]["archived"]
    r = client.post("/api/v1/models/m/versions", json={"checkpoint_uuid": u1}, headers=auth)
    assert r.status_code == 409
    assert [
        m["name"] for m in client.get("/api/v1/models?archived=false", headers=auth).json["models"]
    ] == []
    client.post("/api/v1/models/m/unarchive", headers=auth)
    r = client.delete("/api/v1/models/m/versions/1", headers=auth)
    assert r.status_code == 200 and r.json["unreferenced_checkpoints"] == []
    vs = client.get("/api/v1/models/m/versions", headers=auth).json["model_versions"]
    assert [v["version"] for v in vs] == [2]
    assert client.delete("/api/v1/models/m", headers=auth).status_code == 200
    assert client.get("/api/v1/models/m", headers=auth).status_code == 404
