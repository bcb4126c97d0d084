"""The orphan sweep (`master/ckpt/orphans.py`): an upload killed half-way (a real process,
SIGKILLed) leaves objects no checkpoint row names, and on S3 an unfinished multipart upload;
the sweep removes them once older than the grace period and never touches a registered
checkpoint or objects outside uuid-named directories. S3 on moto's server, GCS on the emulator,
the master in process on PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

from flask import Flask

from harness.storage import build
from master.ckpt.orphans import sweep_all
from master.db import db
from master.models import Checkpoint, Experiment, Trial
from tests.checkpoints.conftest import bucket_keys, uuids_in
from tests.checkpoints.servers import s3_client

MiB = 1024 * 1024

# The uploader never completes its multipart upload: run 16 (docs/testing.md) SIGKILLed it
# after it had sent CompleteMultipartUpload, which the server still carried out once the
# client was dead, so the "killed" upload finished. A kill half-way means before that request.
UPLOADER = """
import json, sys, threading
from harness.storage import build, s3_resume
s3_resume._Multipart.finish = lambda self: threading.Event().wait()
build(json.loads(sys.argv[1])).upload(sys.argv[2], sys.argv[3])
"""


def _wait(cond: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def _multipart_uploads(storage: dict[str, Any]) -> list[dict]:
    c = s3_client(storage["endpoint_url"])
    return c.list_multipart_uploads(Bucket=storage["bucket"]).get("Uploads", [])


def _killed_upload(storage: dict[str, Any], tmp: Path, uuid: str) -> None:
    """Start uploading a checkpoint in another process and SIGKILL it half-way."""
    src = tmp / uuid
    src.mkdir()
    (src / "a-small.txt").write_bytes(b"small")
    with open(src / "big.bin", "wb") as f:  # multipart on S3 (16 MiB parts), resumable on GCS
        block = os.urandom(MiB)
        for _ in range(96):
            f.write(block)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen(
        [sys.executable, "-c", UPLOADER, json.dumps(storage), str(src), uuid], env=env
    )
    try:

        def started() -> bool:
            if uuid not in uuids_in(storage):
                return False
            return storage["type"] != "s3" or bool(_multipart_uploads(storage))

        assert _wait(started), "the upload never started"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert not any(k.endswith("/big.bin") for k in bucket_keys(storage)), "finished too early"


def test_killed_upload_is_swept_registered_checkpoints_stay(
    app: Flask, object_storage: dict[str, Any], tmp_path: Path
) -> None:
    backend = build(object_storage)
    kept, killed = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    src = tmp_path / "kept"
    src.mkdir()
    (src / "weights.bin").write_bytes(b"w" * 1000)
    backend.upload(src, kept)
    _killed_upload(object_storage, tmp_path, killed)
    prefix = object_storage["prefix"]
    if object_storage["type"] == "s3":
        c = s3_client(object_storage["endpoint_url"])
        for key in (f"{prefix}/notes.txt", f"{prefix}/not-a-uuid/x"):
            c.put_object(Bucket=object_storage["bucket"], Key=key, Body=b"n")
    else:
        for key in (f"{prefix}/notes.txt", f"{prefix}/not-a-uuid/x"):
            backend._bucket.blob(key).upload_from_string(b"n")  # type: ignore[attr-defined]
    with app.app_context():
        exp = Experiment(
            name="orphans",
            state="ACTIVE",
            owner_id=1,
            config={"checkpoint_storage": object_storage},
            original_config="",
            seed=1,
        )
        db.session.add(exp)
        db.session.flush()
        trial = Trial(experiment_id=exp.id, request_id="0", state="ACTIVE", hparams={}, seed=1)
        db.session.add(trial)
        db.session.flush()
        db.session.add(
            Checkpoint(
                uuid=kept,
                trial_id=trial.id,
                experiment_id=exp.id,
                steps_completed=1,
                storage=object_storage,
            )
        )
        db.session.commit()
        before = bucket_keys(object_storage)
        # Within the grace period (a running upload): nothing goes.
        assert sweep_all(grace_s=3600) == {"checkpoints": 0, "objects": 0, "uploads_aborted": 0}
        assert bucket_keys(object_storage) == before
        # Past it (grace in the future: everything counts as old): the killed upload goes.
        if object_storage["type"] == "s3":
            assert _multipart_uploads(object_storage), "the killed upload's parts are listed"
        done = sweep_all(grace_s=-60)
    assert done["checkpoints"] == 1 and done["objects"] >= 1
    keys = bucket_keys(object_storage)
    assert uuids_in(object_storage) == {kept, "notes.txt", "not-a-uuid"}
    assert f"{prefix}/{kept}/weights.bin" in keys
    if object_storage["type"] == "s3":
        assert done["uploads_aborted"] >= 1
        assert _multipart_uploads(object_storage) == []
