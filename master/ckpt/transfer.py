"""Checkpoint downloads through the master: a .tar.gz streamed as it is written.

`tar_stream` writes the archive in a thread into a bounded queue and the response reads from it,
so a 300 MB checkpoint starts arriving at once and the master holds a few hundred KiB of it at a
time, never the whole archive. Object-store checkpoints are first fetched to a temporary
directory (on disk) by their storage backend.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import tarfile
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from master.ckpt import storage as ckstorage
from master.db import db
from master.errors import NotFound
from master.models import Checkpoint, Experiment

log = logging.getLogger("detlab.master")

PIECE = 256 * 1024  # bytes per queued piece
QUEUED = 8  # pieces in flight: the most a download holds in memory is about 2 MiB

OpenDir = Callable[[], AbstractContextManager[Path]]


def storage_config_of(ckpt: Checkpoint) -> dict[str, Any] | None:
    override = getattr(ckpt, "det_storage_config", None)  # a registered copy (rows deleted)
    if override:
        return dict(override)
    exp = db.session.get(Experiment, ckpt.experiment_id)
    return exp.conf.checkpoint_storage.to_json() if exp is not None else None


def opener_from_storage(ckpt: Checkpoint) -> OpenDir:
    """How to get the checkpoint's files as a directory (read before the response starts)."""
    storage = storage_config_of(ckpt)
    if not storage:
        raise NotFound(f"checkpoint {ckpt.uuid}: its storage is unknown")
    backend = ckstorage.backend(storage)
    return lambda: backend.restore_path(ckpt.uuid)


def opener_for_dir(path: str) -> OpenDir:
    return lambda: contextlib.nullcontext(Path(path))


class _Cancelled(Exception):
    """The client went away: the writer thread stops."""


_END = object()


class _QueueWriter:
    """A write-only file for tarfile's stream mode: coalesces writes into PIECE-sized pieces
    and hands them to the reader, blocking while QUEUED pieces wait (back-pressure)."""

    def __init__(self, q: queue.Queue[Any], cancelled: threading.Event) -> None:
        self._q = q
        self._cancelled = cancelled
        self._buf = bytearray()

    def write(self, data: bytes) -> int:
        self._buf += data
        if len(self._buf) >= PIECE:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self._buf:
            self.put(bytes(self._buf))
            self._buf.clear()

    def put(self, item: Any) -> None:
        while True:
            if self._cancelled.is_set():
                raise _Cancelled
            try:
                self._q.put(item, timeout=0.5)
                return
            except queue.Full:
                continue


def tar_stream(open_dir: OpenDir, name: str) -> Iterator[bytes]:
    """The directory `open_dir()` yields as .tar.gz bytes.

    Raises NotFound before returning when the files cannot be opened (so the caller can still
    answer 404); later failures end the stream early (logged; the client sees a short archive).
    """
    q: queue.Queue[Any] = queue.Queue(maxsize=QUEUED)
    cancelled = threading.Event()
    out = _QueueWriter(q, cancelled)

    def write() -> None:
        try:
            with open_dir() as path, tarfile.open(fileobj=out, mode="w|gz") as tar:  # type: ignore[call-overload]
                tar.add(str(path), arcname=".")
            out.flush()
            out.put(_END)
        except _Cancelled:
            return
        except BaseException as e:  # handed to the reader, which raises or logs it
            with contextlib.suppress(_Cancelled):
                out.put(e)

    threading.Thread(target=write, name=f"tar-{name[:8]}", daemon=True).start()
    first = q.get()
    if isinstance(first, FileNotFoundError):
        cancelled.set()
        raise NotFound(f"checkpoint {name}'s files are gone from storage: {first}") from None
    if isinstance(first, BaseException):
        cancelled.set()
        raise first
    return _rest(first, q, cancelled, name)


def _rest(
    first: Any, q: queue.Queue[Any], cancelled: threading.Event, name: str
) -> Iterator[bytes]:
    item = first
    try:
        while item is not _END:
            if isinstance(item, BaseException):
                log.error("checkpoint %s: download ended early: %s", name, item)
                return
            yield item
            item = q.get()
    finally:
        cancelled.set()  # the client went away (or we are done): stop the writer
