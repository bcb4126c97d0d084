"""A task's `--context` (Determined's `det cmd run|notebook start|shell start -c DIR`): the
directory's .tar.gz, checked, kept in `task_context_chunks` and read back by the task alone.

- Arriving (`check_context`, then `add_with_context`): over the master's `max_model_def_bytes`
  (Determined's 95 MB context limit is the model definition's, so is detlab's) is a 413 naming
  the limit; an archive that does not read to its end is a 400, so is one with a member that
  could escape the task's directory (detlab/tar_safety.py). Either way nothing is stored: the
  task row and its chunks share one transaction.
- Leaving (`context_of`): only the task's own session token (its allocation's, revoked when the
  allocation ends) reads it; its owner's login does not need it, and anybody else's token (another
  task's, another user's) is refused. The task's launcher (harness/task_context.py) unpacks it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import IO

from flask import current_app

from detlab.tar_safety import CorruptArchive, UnsafeArchive, safe_members
from master.auth import Principal
from master.db import db
from master.errors import BadRequest, Forbidden, NotFound, TooLarge
from master.models import Task, TaskContextChunk
from master.services import chunks

Upload = IO[bytes] | bytes
_TABLE = TaskContextChunk.__table__


def limit_bytes() -> int:
    return int(current_app.config["DET"].max_model_def_bytes)


def _too_large(limit: int) -> str:
    return (
        f"context is over {limit:,} bytes ({limit / 2**20:.0f} MiB), the limit for a task's "
        "context (list large files in the directory's .detignore)"
    )


def _size(source: Upload) -> int:
    if isinstance(source, bytes | bytearray | memoryview):
        return len(source)
    pos = source.tell()
    end = source.seek(0, 2)
    source.seek(pos)
    return end - pos


def check_archive(source: Upload) -> None:
    """Read the whole archive once, member by member (never unpacked): 400 for a corrupt one
    or one holding a member that may not be unpacked."""
    stream = io.BytesIO(source) if isinstance(source, bytes | bytearray | memoryview) else source
    start = stream.tell()
    try:
        for _ in safe_members(stream):  # stream mode reads through each file's data
            pass
    except UnsafeArchive as e:
        raise BadRequest(f"context refused: {e}", path="context") from None
    except CorruptArchive as e:
        raise BadRequest(f"context is {e}", path="context") from None
    finally:
        stream.seek(start)


def check_context(context: Upload | None) -> None:
    """Refuse an archive over the limit (413) or one that is corrupt or unsafe (400) before
    anything is written. Call it outside the state lock: reading ~96 MB must not stall the
    scheduler."""
    if context is None:
        return
    limit = limit_bytes()
    if _size(context) > limit:
        raise TooLarge(_too_large(limit))
    check_archive(context)


def add_with_context(task: Task, context: Upload | None) -> None:
    """Insert `task` (not committed) and, with `context` (passed `check_context` first), its
    archive. Under the caller's state lock, taken before these first writes (on SQLite a write
    made before waiting for the lock deadlocks: master/lock_order.py), as an experiment's model
    definition is stored; the rows stay invisible until the caller commits, and a refusal rolls
    both back."""
    limit = limit_bytes()
    db.session.add(task)
    db.session.flush()
    if context is None:
        return
    try:
        size, sha = chunks.store(
            _TABLE,
            {"task_id": task.id},
            context,
            limit,
            _too_large(limit),
        )
    except Exception:
        db.session.rollback()
        raise
    task.context_size, task.context_sha256 = size, sha


def may_read(p: Principal, task: Task) -> str | None:
    """Why `p` may not read `task`'s context (None: it may). Pure."""
    if p.kind != "allocation":
        return f"only task {task.id}'s own session token may read its context"
    if p.task_id != task.id:
        return "this session token belongs to another task"
    return None


def context_of(p: Principal, task_id: str) -> tuple[Task, Iterator[bytes]]:
    """The task and its archive's chunks, for `p` (403 for anyone but the task itself)."""
    task = db.session.get(Task, task_id)
    if task is None:
        raise NotFound(f"task {task_id} not found")
    why = may_read(p, task)
    if why:
        raise Forbidden(why)
    if task.context_sha256 is None:
        raise NotFound(f"task {task_id} has no context")
    return task, chunks.iter_chunks(db.engine, _TABLE, {"task_id": task.id})
