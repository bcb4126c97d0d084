"""The orphan sweep: a killed upload's objects, and unfinished S3 multipart uploads, removed.

A checkpoint is registered (a `checkpoints` row) only after every file is stored, so an upload
killed half-way leaves objects under `<prefix>/<uuid>/` that no row names, and possibly an S3
multipart upload that was never completed (its parts cost storage though no object shows).
An APScheduler job (`checkpoint_orphan_interval`, default hourly) looks at every object store
the experiments use: a directory named like a checkpoint uuid, with no checkpoint row in any
state, whose newest object is older than the grace period (`checkpoint_orphan_grace`, default a
day: an upload still running keeps writing objects), is deleted; multipart uploads begun before
the grace period (the later of their start and when this master first saw them) are aborted.
Objects not under a uuid-named directory are never touched.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import select

from master.ckpt import storage as ckstorage
from master.context import master_state
from master.db import db, utcnow
from master.models import Checkpoint, Experiment

log = logging.getLogger("detlab.ckpt.orphans")

UUID_NAME = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
OBJECT_TYPES = ("s3", "gcs")
# Only where objects live: the save_* policy numbers do not change which bucket is swept.
_LOCATION_KEYS = ("type", "bucket", "prefix", "endpoint_url", "access_key", "secret_key")


def object_storages() -> list[dict[str, Any]]:
    """The distinct object stores (bucket + prefix + access) of every experiment."""
    seen: dict[str, dict[str, Any]] = {}
    configs: list[dict[str, Any] | None] = list(
        db.session.execute(select(Experiment.config)).scalars()
    )
    for config in configs:
        # Raw stored JSON on purpose: one odd row must not stop the sweep for every other.
        storage = (config or {}).get("checkpoint_storage") or {}
        if storage.get("type") not in OBJECT_TYPES or not storage.get("bucket"):
            continue
        where = {k: storage[k] for k in _LOCATION_KEYS if storage.get(k) is not None}
        seen.setdefault(json.dumps(where, sort_keys=True, default=str), where)
    return list(seen.values())


def _known(names: list[str]) -> set[str]:
    known: set[str] = set()
    for i in range(0, len(names), 1000):
        chunk = names[i : i + 1000]
        known.update(
            db.session.execute(select(Checkpoint.uuid).where(Checkpoint.uuid.in_(chunk))).scalars()
        )
    return known


def _abort_stale_uploads(backend: Any, before: datetime) -> int:
    """Abort unfinished uploads begun before `before`. Their age is the later of what the store
    says and when this master first saw them (some S3-compatible servers report no real start
    time): a restart only ever delays an abort, never hastens one."""
    seen = master_state().checkpoints.upload_first_seen
    now = utcnow()
    aborted = 0
    for key, upload_id, begun in backend.unfinished_uploads():
        first = seen.setdefault(upload_id, now)
        if max(begun, first) < before:
            backend.abort_upload(key, upload_id)
            seen.pop(upload_id, None)
            aborted += 1
    if len(seen) > 100_000:  # uploads completed meanwhile are never seen again
        seen.clear()
    return aborted


def sweep(storage: dict[str, Any], before: datetime) -> dict[str, int]:
    """Delete the orphaned checkpoint directories (newest object older than `before`) and abort
    multipart uploads begun before it, in one object store."""
    backend = ckstorage.backend(storage)
    stale = {
        name: keys
        for name, keys in backend.stale_directories(before).items()  # type: ignore[attr-defined]
        if UUID_NAME.match(name)
    }
    orphans = sorted(set(stale) - _known(sorted(stale)))
    keys = [k for name in orphans for k in stale[name]]
    backend.delete_keys(keys)  # type: ignore[attr-defined]
    aborted = _abort_stale_uploads(backend, before)
    if orphans or aborted:
        log.info(
            "orphan sweep of %s: %d partial checkpoint(s) (%d objects) deleted, %d unfinished "
            "upload(s) aborted",
            backend,
            len(orphans),
            len(keys),
            aborted,
        )
    return {"checkpoints": len(orphans), "objects": len(keys), "uploads_aborted": aborted}


def sweep_all(grace_s: float | None = None) -> dict[str, int]:
    """The APScheduler job: sweep every object store the experiments use."""
    if grace_s is None:
        grace_s = float(current_app.config["DET"].checkpoint_orphan_grace)
    before = utcnow() - timedelta(seconds=grace_s)
    total = {"checkpoints": 0, "objects": 0, "uploads_aborted": 0}
    for storage in object_storages():
        try:
            done = sweep(storage, before)
        except Exception as e:  # noqa: BLE001 - one unreachable bucket must not stop the rest
            log.warning("orphan sweep of bucket %s failed: %s", storage.get("bucket"), e)
            continue
        for k, v in done.items():
            total[k] += v
    db.session.commit()
    return total


def sweep_checkpoint_orphans() -> None:
    """The background job: unregistered checkpoint data on shared_fs (orphan_dirs.py) and in the
    object stores (above), both idle past `checkpoint_orphan_grace`."""
    from master.ckpt.orphan_dirs import sweep_orphans

    grace = float(current_app.config["DET"].checkpoint_orphan_grace)
    sweep_orphans(grace=grace)
    sweep_all(grace_s=grace)
