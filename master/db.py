"""The database handle and URL handling (PostgreSQL via psycopg2, or embedded SQLite)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import BigInteger, Integer, MetaData, Table, make_url
from sqlalchemy.orm import DeclarativeBase

# Stable constraint names so Alembic migrations can alter them on every backend.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    if TYPE_CHECKING:  # every model maps one table (for `Model.__table__.insert()`)
        __table__: ClassVar[Table]


db = SQLAlchemy(model_class=Base)

# SQLite only autoincrements INTEGER PRIMARY KEY; PostgreSQL gets a real bigint.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")


def normalize_db_url(url: str) -> str:
    """Map a bare `postgresql://` (read as psycopg 3 by SQLAlchemy 2.1) to the psycopg2 we ship."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix) :]
    return url


# SQLite gives a database's -wal, -shm and -journal files the database file's own mode.
SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def keep_sqlite_private(url: str) -> None:
    """Make an embedded database file the master's alone (0600), creating it so if it is new.

    Its directory lets others pass through (trials reach the default checkpoint storage below
    the data dir), and SQLite would create the file with the umask's mode (0644): any trial
    could then read every user's password hash, experiments and logs by path. A file an older
    master made readable is tightened, with its -wal and -shm."""
    parsed = make_url(url)
    name = parsed.database
    if parsed.get_backend_name() != "sqlite" or not name or name == ":memory:":
        return
    if parsed.query.get("uri"):  # a file: URI names its file its own way; left to SQLite
        return
    path = Path(name)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for suffix in SQLITE_SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if side.exists() and side.stat().st_mode & 0o077:
            side.chmod(0o600)


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime | None) -> str | None:
    """ISO 8601 in UTC; SQLite hands back naive datetimes that were stored as UTC."""
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")
