"""Checkpoint directories written but never registered (a trial died between storing its files
and registering them) are deleted once nothing can still register them.

Only shared_fs roots the master can see are swept. A directory is an orphan when its name is a
checkpoint uuid that no checkpoint row and no model version knows, and nothing in it changed for
`checkpoint_orphan_grace` seconds: longer than a trial keeps retrying a registration
(DET_MASTER_OUTAGE_S) or takes to write a checkpoint. The registration check is repeated right
before each deletion, so a checkpoint registered meanwhile is never touched.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flask import current_app
from sqlalchemy import select

from master.db import db
from master.models import Checkpoint, Experiment, ModelVersion

log = logging.getLogger("detlab.master")

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def orphans(
    dirs: Iterable[tuple[str, float]], registered: set[str], now: float, grace: float
) -> list[str]:
    """Pure: which `(name, newest mtime)` directories are unregistered checkpoints left alone
    for longer than `grace` seconds."""
    return sorted(
        name
        for name, newest in dirs
        if _UUID.match(name) and name not in registered and now - newest > grace
    )


def newest_mtime(path: Path) -> float:
    """The latest modification time of the directory or anything in it."""
    newest = path.stat().st_mtime
    for root, dirnames, files in os.walk(path):
        for name in dirnames + files:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue
    return newest


def storage_roots() -> list[Path]:
    """The shared_fs directories experiments store checkpoints in that the master can read."""
    configs: Iterable[Any] = db.session.execute(
        select(Experiment.config["checkpoint_storage"]).distinct()
    ).scalars()
    roots: set[Path] = set()
    for storage in configs:
        root = _root_of(storage)
        if root is not None and root.is_dir():
            roots.add(root)
    return sorted(roots)


def _root_of(storage: Any) -> Path | None:
    if isinstance(storage, str):  # SQLite hands JSON back as text here
        import json

        try:
            storage = json.loads(storage)
        except ValueError:
            return None
    if not isinstance(storage, dict) or storage.get("type", "shared_fs") != "shared_fs":
        return None
    if not storage.get("host_path"):
        return None
    base = Path(storage["host_path"])
    return base / storage["storage_path"] if storage.get("storage_path") else base


def _known(uuids: list[str]) -> set[str]:
    """Which of these uuids a checkpoint row or a model version knows (1,000 per query)."""
    known: set[str] = set()
    for i in range(0, len(uuids), 1000):
        part = uuids[i : i + 1000]
        known.update(
            db.session.execute(select(Checkpoint.uuid).where(Checkpoint.uuid.in_(part))).scalars()
        )
        known.update(
            db.session.execute(
                select(ModelVersion.checkpoint_uuid).where(ModelVersion.checkpoint_uuid.in_(part))
            ).scalars()
        )
    return known


def find_orphans(grace: float, now: float | None = None) -> list[Path]:
    """Unregistered checkpoint directories older than `grace` in every reachable root."""
    now = time.time() if now is None else now
    found: list[Path] = []
    for root in storage_roots():
        names = [
            e.name
            for e in os.scandir(root)
            if e.is_dir(follow_symlinks=False) and _UUID.match(e.name)
        ]
        if not names:
            continue
        registered = _known(names)
        dirs = []
        for name in names:
            if name in registered:
                continue  # only unregistered directories are walked
            try:
                dirs.append((name, newest_mtime(root / name)))
            except OSError:
                continue
        found.extend(root / name for name in orphans(dirs, registered, now, grace))
    return found


def sweep_orphans(grace: float | None = None, now: float | None = None) -> list[str]:
    """Delete the orphans; returns their paths. The APScheduler job's body."""
    if grace is None:
        grace = float(current_app.config["DET"].checkpoint_orphan_grace)
    deleted: list[str] = []
    for path in find_orphans(grace, now):
        if _known([path.name]):  # registered since it was listed: keep it
            continue
        shutil.rmtree(path, ignore_errors=True)
        log.warning("deleted checkpoint directory %s: written but never registered", path)
        deleted.append(str(path))
    db.session.commit()
    return deleted
