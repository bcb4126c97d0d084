"""`det e delete-tb-files` (DELETE /experiments/<id>/tensorboard-files) and experiment delete
remove exactly the experiment's TensorBoard files from each checkpoint storage (in-process
master, real shared_fs / moto S3 / GCS emulator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from harness.core._tensorboard import STORAGE_DIR, TensorboardManager
from harness.storage import build
from master.db import db
from tests.api.conftest import login, submit

CONFIG = """
name: tb-delete
entrypoint: python3 train.py
hyperparameters: {lr: 0.1}
searcher: {name: single, metric: loss, smaller_is_better: true, max_length: {batches: 100}}
checkpoint_storage: %s
"""


@pytest.fixture(params=["shared_fs", "s3", "gcs"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "shared_fs":
        (tmp_path / "shared").mkdir()
        return {"type": "shared_fs", "host_path": str(tmp_path / "shared")}
    return dict(request.getfixturevalue(f"{request.param}_storage"))


def _upload(storage: dict[str, Any], exp_id: int, trial_id: int, tmp: Path) -> None:
    tb = TensorboardManager(
        tmp / f"tb-{exp_id}-{trial_id}", lambda: build(storage), exp_id, trial_id
    )
    (tb.path / "events.out.tfevents.1.host").write_bytes(b"e" * 100)
    (tb.path / "plugins").mkdir()
    (tb.path / "plugins" / "x.json").write_text("{}")
    assert tb.sync() == 2


def _files(storage: dict[str, Any]) -> list[str]:
    return sorted(build(storage).list_files(STORAGE_DIR))


def test_delete_tb_files_removes_only_that_experiments(
    app: Flask, client: FlaskClient, storage: dict[str, Any], tmp_path: Path
) -> None:
    auth = login(client)
    ids = []
    for _ in range(2):
        r = submit(client, auth, CONFIG % json.dumps(storage))
        assert r["status"] == 201, r
        ids.append(int(r["experiment"]["id"]))
    one, two = ids
    _upload(storage, one, 1, tmp_path)
    _upload(storage, one, 2, tmp_path)
    _upload(storage, two, 3, tmp_path)
    assert len(_files(storage)) == 6

    r = client.delete(f"/api/v1/experiments/{one}/tensorboard-files", headers=auth)
    assert r.status_code == 200, r.json
    assert r.json == {"experiment_id": one, "files_deleted": 4}
    assert _files(storage) == [
        f"experiment/{two}/trial/3/events.out.tfevents.1.host",
        f"experiment/{two}/trial/3/plugins/x.json",
    ]
    if storage["type"] == "shared_fs":  # no empty directories left behind
        assert not (Path(storage["host_path"]) / STORAGE_DIR / "experiment" / str(one)).exists()
    again = client.delete(f"/api/v1/experiments/{one}/tensorboard-files", headers=auth)
    assert again.json["files_deleted"] == 0
    assert (
        client.delete("/api/v1/experiments/999/tensorboard-files", headers=auth).status_code == 404
    )

    # Deleting the experiment takes its TensorBoard files with it.
    assert client.post(f"/api/v1/experiments/{two}/kill", headers=auth).status_code == 200
    with app.app_context():
        from master.models import Experiment
        from master.states import State

        e = db.session.get(Experiment, two)
        e.state = State.CANCELED.value  # its trial "exited"
        db.session.commit()
    r = client.delete(f"/api/v1/experiments/{two}", headers=auth)
    assert r.status_code == 200, r.json
    assert r.json["tensorboard_files_deleted"] == 2
    assert _files(storage) == []


def test_unreachable_shared_fs_is_a_clear_conflict(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    storage = {"type": "shared_fs", "host_path": "/nonexistent/detlab-tb-test"}
    exp_id = submit(client, auth, CONFIG % json.dumps(storage))["experiment"]["id"]
    r = client.delete(f"/api/v1/experiments/{exp_id}/tensorboard-files", headers=auth)
    assert r.status_code == 409
    assert "not mounted on the master" in r.json["error"]["message"]
