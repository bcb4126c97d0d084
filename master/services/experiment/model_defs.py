"""Experiments' model definitions, kept apart from the `experiments` table in 1 MiB chunks.

Stored while the upload is read (a chunk in memory at a time) and served chunk by chunk, so
neither a submission nor a download holds a whole archive in the master's memory, and no
experiment query (lists, describes, the scheduler, metrics ingestion) ever loads one.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from typing import IO

from sqlalchemy import Engine, select

from master.db import db
from master.errors import TooLarge
from master.models import ModelDefChunk

CHUNK = 1 << 20


def _chunks_of(source: IO[bytes] | bytes) -> Iterator[bytes]:
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        for start in range(0, len(data), CHUNK):
            yield data[start : start + CHUNK]
        return
    while chunk := source.read(CHUNK):
        yield chunk


def store(experiment_id: int, source: IO[bytes] | bytes, limit: int) -> tuple[int, str]:
    """Add the chunks of `source` to the session (the caller commits); `(size, sha256)`.

    Raises TooLarge as soon as more than `limit` bytes have arrived.
    """
    digest = hashlib.sha256()
    size = 0
    for seq, chunk in enumerate(_chunks_of(source)):
        size += len(chunk)
        if size > limit:
            raise TooLarge(
                f"model definition is over {limit / 2**20:.0f} MiB, the limit "
                "(list large files in a .detignore)"
            )
        digest.update(chunk)
        # A Core insert: sent now and not kept in the session, so memory holds one chunk.
        db.session.execute(
            ModelDefChunk.__table__.insert().values(
                experiment_id=experiment_id, seq=seq, data=chunk
            )
        )
    return size, digest.hexdigest()


def iter_chunks(engine: Engine, experiment_id: int) -> Iterator[bytes]:
    """The stored bytes in order, one chunk at a time, each read on a connection of its own
    that goes back to the pool at once: a slow download holds no connection or transaction
    (and needs no request context: the response streams after the request's teardown)."""
    for seq in itertools.count():
        with engine.connect() as conn:
            data = conn.execute(
                select(ModelDefChunk.data).where(
                    ModelDefChunk.experiment_id == experiment_id, ModelDefChunk.seq == seq
                )
            ).scalar_one_or_none()
        if data is None:
            return
        yield bytes(data)


def read_all(experiment_id: int) -> bytes:
    """The whole archive (small ones only: tests and copies)."""
    return b"".join(iter_chunks(db.engine, experiment_id))
