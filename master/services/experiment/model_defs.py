"""Experiments' model definitions, kept apart from the `experiments` table in 1 MiB chunks
(master/services/chunks.py), so no experiment query ever loads them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from sqlalchemy import Engine

from master.db import db
from master.models import ModelDefChunk
from master.services import chunks

CHUNK = chunks.CHUNK
_TABLE = ModelDefChunk.__table__


def store(experiment_id: int, source: IO[bytes] | bytes, limit: int) -> tuple[int, str]:
    """Add the chunks of `source` to the session (the caller commits); `(size, sha256)`.

    Raises TooLarge as soon as more than `limit` bytes have arrived.
    """
    return chunks.store(
        _TABLE,
        {"experiment_id": experiment_id},
        source,
        limit,
        f"model definition is over {limit / 2**20:.0f} MiB, the limit "
        "(list large files in a .detignore)",
    )


def iter_chunks(engine: Engine, experiment_id: int) -> Iterator[bytes]:
    """The stored bytes in order, one chunk (one short-lived connection) at a time."""
    return chunks.iter_chunks(engine, _TABLE, {"experiment_id": experiment_id})


def read_all(experiment_id: int) -> bytes:
    """The whole archive (small ones only: tests and copies)."""
    return b"".join(iter_chunks(db.engine, experiment_id))
