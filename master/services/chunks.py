"""Archives kept in a table of 1 MiB chunks (model definitions, task contexts).

Stored while the upload is read (a chunk in memory at a time) and served chunk by chunk, so
neither a submission nor a download holds a whole archive in the master's memory, and no query
of the owning rows (lists, describes, the scheduler) ever loads one.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from typing import IO, Any

from sqlalchemy import Engine, Table, select

from master.db import db
from master.errors import TooLarge

CHUNK = 1 << 20


def chunks_of(source: IO[bytes] | bytes) -> Iterator[bytes]:
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        for start in range(0, len(data), CHUNK):
            yield data[start : start + CHUNK]
        return
    while chunk := source.read(CHUNK):
        yield chunk


def store(
    table: Table, keys: dict[str, Any], source: IO[bytes] | bytes, limit: int, too_large: str
) -> tuple[int, str]:
    """Add the chunks of `source` under `keys` to the session (the caller commits, or rolls
    back: nothing of a refused upload stays); `(size, sha256)`. Raises TooLarge(`too_large`) as
    soon as more than `limit` bytes have arrived."""
    digest = hashlib.sha256()
    size = 0
    for seq, chunk in enumerate(chunks_of(source)):
        size += len(chunk)
        if size > limit:
            raise TooLarge(too_large)
        digest.update(chunk)
        # A Core insert: sent now and not kept in the session, so memory holds one chunk.
        db.session.execute(table.insert().values(**keys, seq=seq, data=chunk))
    return size, digest.hexdigest()


def iter_chunks(engine: Engine, table: Table, keys: dict[str, Any]) -> Iterator[bytes]:
    """The stored bytes in order, one chunk at a time, each read on a connection of its own
    that goes back to the pool at once: a slow download holds no connection or transaction
    (and needs no request context: the response streams after the request's teardown)."""
    where = [table.c[k] == v for k, v in keys.items()]
    for seq in itertools.count():
        with engine.connect() as conn:
            data = conn.execute(
                select(table.c.data).where(*where, table.c.seq == seq)
            ).scalar_one_or_none()
        if data is None:
            return
        yield bytes(data)
