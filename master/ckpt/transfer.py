"""The master fetches a checkpoint from object storage for clients that cannot reach it."""

from __future__ import annotations

import tarfile
from typing import IO, Any

from master.ckpt import storage as ckstorage
from master.db import db
from master.errors import NotFound
from master.models import Checkpoint, Experiment


def storage_config_of(ckpt: Checkpoint) -> dict[str, Any] | None:
    override = getattr(ckpt, "det_storage_config", None)  # a registered copy (rows deleted)
    if override:
        return dict(override)
    exp = db.session.get(Experiment, ckpt.experiment_id)
    return dict(exp.config.get("checkpoint_storage") or {}) if exp is not None else None


def tar_from_storage(ckpt: Checkpoint, out: IO[bytes]) -> None:
    storage = storage_config_of(ckpt)
    if not storage:
        raise NotFound(f"checkpoint {ckpt.uuid}: its storage is unknown")
    backend = ckstorage.backend(storage)
    try:
        with backend.restore_path(ckpt.uuid) as path, tarfile.open(fileobj=out, mode="w:gz") as tar:
            tar.add(str(path), arcname=".")
    except FileNotFoundError as e:
        raise NotFound(f"checkpoint {ckpt.uuid}'s files are gone from storage: {e}") from None
