"""A large object downloaded in parallel byte ranges, resumable chunk by chunk (S3 and GCS).

The chunks are written into `<file>.det-part` (preallocated) at their offsets; each is
journaled once written, so a restarted download fetches only the missing ones; the part file
is renamed to the real name at the end (a killed download never leaves a half file under it).
The object's etag (S3) or generation (GCS) is part of each chunk's record and of every range
request's precondition: a changed object is never stitched from two versions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from harness.storage.journal import Journal

PART_SUFFIX = ".det-part"


class Chunked(Protocol):
    """A transfer in chunks (a ranged download, an S3 multipart upload)."""

    def start(self, pool: ThreadPoolExecutor) -> None: ...

    def finish(self) -> None: ...


def run_transfers(
    pool: ThreadPoolExecutor, whole: Sequence[Future[Any]], chunked: Sequence[Chunked]
) -> None:
    """Queue the chunked transfers' chunks beside the whole-file transfers already running, wait
    for the whole files, then finish each chunked one (its last step, once its chunks are in)."""
    for c in chunked:
        c.start(pool)
    for f in whole:
        f.result()
    for c in chunked:
        c.finish()


class RangedDownload:
    def __init__(
        self,
        journal: Journal,
        key: str,
        target: Path,
        size: int,
        version: str,
        chunk: int,
        read: Callable[[int, int], Iterable[bytes]],
    ) -> None:
        """`read(start, end)`: the object's bytes `start..end` (inclusive), conditional on
        `version`, as pieces."""
        self.journal, self.key, self.target = journal, key, target
        self.size, self.version, self.chunk, self.read = size, version, chunk, read
        self.part = target.with_name(target.name + PART_SUFFIX)
        done = {
            int(r["index"])
            for r in journal.records("chunk")
            if r.get("key") == key and r.get("etag") == version and r.get("chunk") == chunk
        }
        if not (self.part.is_file() and self.part.stat().st_size == size):
            done = set()
            with open(self.part, "wb") as f:
                f.truncate(size)
        self.todo = [i for i in range(max(1, math.ceil(size / chunk))) if i not in done]
        self.futures: list[Future[None]] = []

    def _get(self, i: int) -> None:
        start = i * self.chunk
        end = min(self.size, start + self.chunk) - 1
        fd = os.open(self.part, os.O_WRONLY)
        try:
            offset = start
            for piece in self.read(start, end):  # streamed: no chunk-sized copies in memory
                os.pwrite(fd, piece, offset)
                offset += len(piece)
        finally:
            os.close(fd)
        if offset != end + 1:
            raise OSError(f"short read of {self.key} bytes {start}-{end}: {offset - start}")
        self.journal.add(
            {
                "kind": "chunk",
                "key": self.key,
                "etag": self.version,
                "chunk": self.chunk,
                "index": i,
            }
        )

    def start(self, pool: ThreadPoolExecutor) -> None:
        self.futures = [pool.submit(self._get, i) for i in self.todo]

    def finish(self) -> None:
        for f in self.futures:
            f.result()
        os.replace(self.part, self.target)
        self.journal.add({"kind": "file", "key": self.key, "size": self.size, "etag": self.version})
