"""The embedded database is the master's alone (master/db.py, `keep_sqlite_private`)."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

from master.db import keep_sqlite_private


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_new_database_and_its_wal_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "detlab.sqlite"
    keep_sqlite_private(f"sqlite:///{path}")
    assert mode(path) == 0o600
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    for suffix in ("-wal", "-shm"):  # SQLite gives them the database's mode
        assert mode(tmp_path / f"detlab.sqlite{suffix}") == 0o600
    conn.close()


def test_an_older_readable_database_is_tightened_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "detlab.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (42)")
    conn.commit()
    side = [path, tmp_path / "detlab.sqlite-wal", tmp_path / "detlab.sqlite-shm"]
    for p in side:
        p.chmod(0o644)
    keep_sqlite_private(f"sqlite:///{path}")
    assert [mode(p) for p in side] == [0o600] * 3
    assert conn.execute("SELECT x FROM t").fetchall() == [(42,)], "its data untouched"
    conn.close()


def test_other_databases_are_left_alone(tmp_path: Path) -> None:
    keep_sqlite_private("postgresql+psycopg2://postgres@127.0.0.1:5432/x")
    keep_sqlite_private("sqlite://")
    keep_sqlite_private("sqlite:///:memory:")
    keep_sqlite_private(f"sqlite:///file:{tmp_path}/x.sqlite?mode=ro&uri=true")
    assert list(tmp_path.iterdir()) == []
