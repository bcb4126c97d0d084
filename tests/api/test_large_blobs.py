"""Blobs never cost memory they need not: experiment queries never load model definitions, and
model definitions and checkpoints stream (in and out) instead of sitting whole in memory."""

from __future__ import annotations

import io
import os
import tarfile
import tracemalloc
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import LargeBinary, event
from werkzeug.test import EnvironBuilder, run_wsgi_app

from master.db import db
from master.models import Experiment
from tests.api.conftest import CONFIG, login, start_one, submit, trial_auth

MIB = 1 << 20


@contextmanager
def statements(app: Flask) -> Iterator[list[str]]:
    """Every SQL statement the app sends meanwhile."""
    seen: list[str] = []

    def record(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
        seen.append(statement)

    with app.app_context():
        engine = db.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@contextmanager
def peak_python_memory() -> Iterator[list[int]]:
    """The peak of Python allocations (every thread) above where it started, in bytes."""
    out: list[int] = []
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    try:
        yield out
    finally:
        out.append(tracemalloc.get_traced_memory()[1] - base)
        tracemalloc.stop()


def test_no_experiment_column_is_a_blob() -> None:
    blobs = [c.name for c in Experiment.__table__.columns if isinstance(c.type, LargeBinary)]
    assert blobs == []


def test_lists_and_describes_never_touch_model_definitions(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    model_def = os.urandom(8 * MIB)
    for _ in range(3):
        assert submit(client, auth, model_def=model_def)["status"] == 201
    spec = start_one(app, client)
    exp_id = int(spec["env"]["DET_EXPERIMENT_ID"])
    with statements(app) as sql:
        assert client.get("/api/v1/experiments", headers=auth).status_code == 200
        assert client.get(f"/api/v1/experiments/{exp_id}", headers=auth).status_code == 200
        assert client.get("/", headers=auth).status_code in (200, 302)
        r = client.post(
            f"/api/v1/trials/{spec['trial_id']}/metrics",
            json={"reports": [{"group": "validation", "steps_completed": 1, "metrics": {"x": 1}}]},
            headers=trial_auth(spec),
        )
        assert r.status_code == 200
    assert sql and not [s for s in sql if "model_def_chunks" in s]
    # The model definition itself arrives whole, streamed, with its size and hash.
    r = client.get(f"/api/v1/experiments/{exp_id}/model_def", headers=auth)
    assert r.is_streamed and r.data == model_def
    assert r.headers["Content-Length"] == str(len(model_def))


def test_model_definition_upload_and_download_are_streamed(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    model_def = os.urandom(24 * MIB)
    builder = EnvironBuilder(
        path="/api/v1/experiments",
        method="POST",
        headers=auth,
        data={"config": CONFIG, "model_def": (io.BytesIO(model_def), "model.tar.gz")},
    )
    environ = builder.get_environ()  # the request body is built before we measure
    with peak_python_memory() as up:
        app_iter, status, _ = run_wsgi_app(app, environ, buffered=True)
    assert status.startswith("201"), b"".join(app_iter)
    assert up[0] < 8 * MIB, f"upload peaked at {up[0] / MIB:.1f} MiB"

    exp_id = client.get("/api/v1/experiments", headers=auth).json["experiments"][0]["id"]
    r = client.get(f"/api/v1/experiments/{exp_id}/model_def", headers=auth, buffered=False)
    assert r.is_streamed
    got = io.BytesIO()
    with peak_python_memory() as down:
        for piece in r.response:
            assert len(piece) <= MIB
            got.write(piece)
            del piece
    assert got.getvalue() == model_def
    # got itself grows to 24 MiB; what the master held on top of it stayed small.
    assert down[0] - len(model_def) < 8 * MIB, f"download peaked at {down[0] / MIB:.1f} MiB"


def test_checkpoint_download_is_streamed_with_bounded_memory(
    app: Flask, client: FlaskClient, tmp_path: Path
) -> None:
    auth = login(client)
    root = tmp_path / "ckpts"
    config = CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: {root}}}\n"
    assert submit(client, auth, config=config)["status"] == 201
    spec = start_one(app, client)
    ckpt = str(uuid.uuid4())
    files = {"model.pt": os.urandom(20 * MIB), "sub/opt.pt": os.urandom(MIB)}
    for name, data in files.items():
        (root / ckpt / name).parent.mkdir(parents=True, exist_ok=True)
        (root / ckpt / name).write_bytes(data)
    r = client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": ckpt,
            "trial_id": spec["trial_id"],
            "steps_completed": 1,
            "metadata": {"steps_completed": 1},
            "resources": {k: len(v) for k, v in files.items()},
        },
        headers=trial_auth(spec),
    )
    assert r.status_code == 201, r.json

    r = client.get(f"/api/v1/checkpoints/{ckpt}/download", headers=auth, buffered=False)
    assert r.status_code == 200 and r.is_streamed
    archive = io.BytesIO()
    with peak_python_memory() as peak:
        for piece in r.response:
            archive.write(piece)
            del piece
    assert peak[0] - archive.tell() < 8 * MIB, f"peaked at {peak[0] / MIB:.1f} MiB"
    archive.seek(0)
    with tarfile.open(fileobj=archive, mode="r:gz") as tar:
        for name, data in files.items():
            member = tar.extractfile(f"./{name}")
            assert member is not None and member.read() == data

    # A checkpoint whose files are gone is still a clean 404, not a broken stream.
    (root / ckpt / "model.pt").unlink()
    (root / ckpt / "sub" / "opt.pt").unlink()
    (root / ckpt / "sub").rmdir()
    (root / ckpt).rmdir()
    assert client.get(f"/api/v1/checkpoints/{ckpt}/download", headers=auth).status_code == 404
