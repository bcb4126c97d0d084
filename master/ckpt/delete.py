"""User-asked deletions: checkpoints, or a whole experiment (its checkpoints, then its rows)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from master.ckpt import gc
from master.ckpt.states import CheckpointState, state_of
from master.ckpt.tensorboard_files import delete_tensorboard_files
from master.db import db
from master.errors import BadRequest, Conflict, NotFound
from master.models import Checkpoint, Experiment
from master.services.checkpoint.checkpoints import is_uuid
from master.states import is_terminal

log = logging.getLogger("detlab.ckpt")


def delete_checkpoints(
    uuids: list[str], may_change: Callable[[int], None] | None = None
) -> list[Checkpoint]:
    """Mark the checkpoints DELETING (the GC job removes the files); registered ones refuse."""
    if not uuids or not all(isinstance(u, str) for u in uuids):
        raise BadRequest("give a list of checkpoint uuids", path="checkpoint_uuids")
    for i, u in enumerate(uuids):
        if not is_uuid(u):
            raise BadRequest(f"{u[:80]!r} is not a checkpoint uuid", path=f"checkpoint_uuids[{i}]")
    rows = list(db.session.execute(select(Checkpoint).where(Checkpoint.uuid.in_(uuids))).scalars())
    missing = sorted(set(uuids) - {c.uuid for c in rows})
    if missing:
        raise NotFound(f"checkpoint(s) not found: {', '.join(missing)}")
    for exp_id in sorted({c.experiment_id for c in rows}):
        if may_change is not None:
            may_change(exp_id)  # raises before anything is marked
    gc.mark_for_deletion(rows, "deleted by a user")
    db.session.commit()
    return rows


def delete_experiment(exp: Experiment) -> dict[str, Any]:
    """Delete an ended experiment's checkpoint files (not registered ones), then its rows.

    Files are deleted now, by the master; if any fail, the experiment stays (with the failures
    recorded on the checkpoints and retried by the GC job) and the call reports them.
    """
    if not is_terminal(exp.state):
        raise Conflict(
            f"experiment {exp.id} is {exp.state}; kill it (or wait for it to end) before deleting"
        )
    rows = list(
        db.session.execute(select(Checkpoint).where(Checkpoint.experiment_id == exp.id)).scalars()
    )
    registered = gc.registered_uuids([c.uuid for c in rows])
    storage = exp.conf.checkpoint_storage.to_json()
    doomed = [c for c in rows if c.uuid not in registered]
    gc.mark_for_deletion(
        [c for c in doomed if state_of(c) != CheckpointState.DELETED],
        f"experiment {exp.id} deleted",
    )
    db.session.commit()
    waiting = [c.uuid for c in doomed if state_of(c) != CheckpointState.DELETED]
    if waiting and not gc.master_reaches(storage):
        raise Conflict(
            f"experiment {exp.id}: agents are deleting its {len(waiting)} checkpoint(s) (the "
            "master cannot reach their storage); delete the experiment again once they are done"
        )
    failed: dict[str, str] = {}
    now = [c for c in doomed if state_of(c) != CheckpointState.DELETED]
    with gc.run_lock():  # not at the same time as the GC job's deletions
        for c in now:
            db.session.refresh(c)
            if state_of(c) == CheckpointState.DELETED:
                continue
            if state_of(c) == CheckpointState.DELETE_FAILED:
                gc.transition(c, CheckpointState.DELETING, f"experiment {exp.id} deleted (retry)")
            try:
                gc.delete_files(storage, c.uuid)
                error = None
            except Exception as e:  # noqa: BLE001 - reported to the caller, retried by the job
                error = f"{type(e).__name__}: {e}"
                failed[c.uuid] = error
            gc.record_result(c, error)
            db.session.commit()
    if failed:
        first = next(iter(failed.items()))
        raise Conflict(
            f"experiment {exp.id} not deleted: {len(failed)} checkpoint(s) could not be "
            f"deleted (retried in the background), e.g. {first[0]}: {first[1]}"
        )
    freed = sum(int(c.size or 0) for c in now)
    tb_files = _delete_tensorboard_files(exp)
    db.session.delete(exp)
    db.session.commit()
    return {
        "experiment_id": exp.id,
        "checkpoints_deleted": len(now),
        "bytes_freed": freed,
        "registered_kept": sorted(registered),
        "tensorboard_files_deleted": tb_files,
    }


def _delete_tensorboard_files(exp: Experiment) -> int:
    """The experiment's TensorBoard files go with it where the master reaches them (a shared_fs
    it does not mount keeps them: `tensorboard/experiment/<id>/` there, named in the log)."""
    try:
        return int(delete_tensorboard_files(exp)["files_deleted"])
    except Conflict as e:
        log.warning("%s", e)
    except Exception as e:  # noqa: BLE001 - a storage error must not keep a deleted experiment
        log.warning("experiment %d: its TensorBoard files could not be deleted: %s", exp.id, e)
    return 0
