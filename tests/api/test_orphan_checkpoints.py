"""Checkpoint directories written but never registered are deleted once idle for the grace
period; registered ones, recent ones and anything not named like a checkpoint never are."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient

from master.ckpt.orphan_dirs import orphans, sweep_orphans
from tests.api.conftest import CONFIG, login, start_one, submit, trial_auth

HOUR = 3600.0


def test_orphans_are_unregistered_uuid_dirs_idle_past_the_grace() -> None:
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    dirs = [(a, 0.0), (b, 0.0), (c, 5000.0), ("not-a-checkpoint", 0.0)]
    assert orphans(dirs, registered={b}, now=6000.0, grace=HOUR) == [a]


def _write(root: Path, name: str, age: float) -> Path:
    d = root / name
    (d / "sub").mkdir(parents=True)
    for f in (d / "model.pt", d / "sub" / "opt.pt"):
        f.write_bytes(b"x")
    when = time.time() - age
    for p in (d / "model.pt", d / "sub" / "opt.pt", d / "sub", d):
        os.utime(p, (when, when))
    return d


def test_sweep_deletes_only_old_unregistered_checkpoint_dirs(
    app: Flask, client: FlaskClient, tmp_path: Path
) -> None:
    auth = login(client)
    root = tmp_path / "ckpts"
    config = CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: {root}}}\n"
    assert submit(client, auth, config=config)["status"] == 201
    spec = start_one(app, client)
    registered = _write(root, str(uuid.uuid4()), 2 * HOUR)
    r = client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": registered.name,
            "trial_id": spec["trial_id"],
            "steps_completed": 1,
            "metadata": {"steps_completed": 1},
            "resources": {"model.pt": 1, "sub/opt.pt": 1},
        },
        headers=trial_auth(spec),
    )
    assert r.status_code == 201
    orphan = _write(root, str(uuid.uuid4()), 2 * HOUR)
    recent = _write(root, str(uuid.uuid4()), 60)  # may still be registered (a retry)
    # Old, but a file deep inside was written a minute ago: still being written.
    busy = _write(root, str(uuid.uuid4()), 2 * HOUR)
    os.utime(busy / "sub" / "opt.pt", (time.time() - 60,) * 2)
    other = _write(root, "scratch", 2 * HOUR)

    with app.app_context():
        deleted = sweep_orphans(grace=HOUR)
    assert deleted == [str(orphan)]
    assert not orphan.exists()
    for kept in (registered, recent, busy, other):
        assert kept.is_dir(), kept
