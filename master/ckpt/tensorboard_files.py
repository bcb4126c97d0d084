"""An experiment's TensorBoard files in its checkpoint storage: how many, and deleting them
(`det e delete-tb-files`, and with the experiment). The layout is the harness's
(harness/core/_tensorboard.py): `<storage>/tensorboard/experiment/<id>/trial/<trial>/...`."""

from __future__ import annotations

import shutil
from typing import Any

from harness.core._tensorboard import STORAGE_DIR
from harness.storage.shared_fs import SharedFSStorageManager
from master.ckpt import storage as ckstorage
from master.errors import Conflict
from master.models import Experiment


def experiment_prefix(exp_id: int) -> str:
    return f"experiment/{int(exp_id)}/"


def delete_tensorboard_files(exp: Experiment) -> dict[str, Any]:
    """Delete every TensorBoard file of the experiment; returns how many there were."""
    storage = exp.conf.checkpoint_storage.to_json()
    if not ckstorage.master_can_reach(storage):
        raise Conflict(
            f"experiment {exp.id}: its shared_fs checkpoint storage is not mounted on the "
            "master, which cannot delete its TensorBoard files; delete "
            f"tensorboard/{experiment_prefix(exp.id)} under host_path on an agent"
        )
    backend = ckstorage.backend(storage)
    prefix = experiment_prefix(exp.id)
    files = [rel for rel in backend.list_files(STORAGE_DIR) if rel.startswith(prefix)]
    if isinstance(backend, SharedFSStorageManager):
        # The directories too (a glob delete leaves them): nothing of the experiment remains.
        shutil.rmtree(backend.path(STORAGE_DIR) / prefix, ignore_errors=True)
    elif files:
        backend.delete(STORAGE_DIR, [f"{prefix}*"])
    return {"experiment_id": exp.id, "files_deleted": len(files)}
