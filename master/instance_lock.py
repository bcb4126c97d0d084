"""One master per database.

Two masters on one database would both run the scheduling pass and hand the same slot to two
trials. A master therefore holds, for its whole life, a PostgreSQL session advisory lock on a
connection of its own (or, on SQLite, an exclusive `flock` on a file next to the database); a
second master refuses to start and says why. If the lock's connection dies (the database
restarted, or the connection was killed), the master takes the lock again or, when another master
has it meanwhile, stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from master.db import normalize_db_url

log = logging.getLogger("detlab.master")

LOCK_KEY = 0x6465746C6162  # "detlab"
CHECK_EVERY_S = 5.0


class MasterAlreadyRunning(RuntimeError):
    """Another master holds this database."""


class MasterLock:
    """The lock that makes this process the database's only master; `release()` at shutdown."""

    def __init__(self, db_url: str) -> None:
        self.db_url = normalize_db_url(db_url)
        self._conn: Any = None
        self._file: int | None = None
        self._stop = threading.Event()
        self._acquire()

    # -- taking and giving back ----------------------------------------------------------

    def _acquire(self) -> None:
        url = make_url(self.db_url)
        if url.get_backend_name() == "sqlite":
            self._acquire_file(url.database)
        else:
            self._acquire_advisory()

    def _acquire_file(self, database: str | None) -> None:
        if not database or database == ":memory:":
            return  # a private in-memory database: nobody can share it
        path = Path(database).with_name(Path(database).name + ".master-lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise MasterAlreadyRunning(
                f"another detlab master (pid {holder}) is using the database {database}; "
                "stop it first, or give this master its own --data-dir or --db"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._file = fd

    def _acquire_advisory(self) -> None:
        engine = create_engine(
            self.db_url, poolclass=NullPool, connect_args={"application_name": "detlab-master"}
        )
        conn = engine.connect()
        got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LOCK_KEY}).scalar()
        conn.commit()
        if not got:
            holder = conn.execute(
                text(
                    "SELECT coalesce(host(a.client_addr), 'local socket') FROM pg_locks l "
                    "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                    "AND l.granted AND l.database = (SELECT oid FROM pg_database "
                    "WHERE datname = current_database()) LIMIT 1"
                )
            ).scalar()
            conn.close()
            raise MasterAlreadyRunning(
                f"another detlab master (connected from {holder or 'unknown'}) is using the "
                f"database {make_url(self.db_url).database!r}; stop it first, or point this "
                "master at its own database"
            )
        self._conn = conn

    def release(self) -> None:
        self._stop.set()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()  # ending the session releases the advisory lock
            self._conn = None
        if self._file is not None:
            os.close(self._file)
            self._file = None

    # -- keeping it ----------------------------------------------------------------------

    def watch(self, on_lost: Callable[[str], None]) -> None:
        """Check the lock's connection every few seconds; `on_lost` when it cannot be kept."""
        if self._conn is None:
            return
        threading.Thread(
            target=self._watch, args=(on_lost,), name="master-lock", daemon=True
        ).start()

    def _watch(self, on_lost: Callable[[str], None]) -> None:
        while not self._stop.wait(CHECK_EVERY_S):
            if self._conn is not None:
                try:
                    self._conn.execute(text("SELECT 1")).scalar()
                    self._conn.commit()
                    continue
                except Exception as e:
                    log.warning("the master lock connection failed (%s): re-taking it", e)
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
            try:
                self._acquire_advisory()
            except MasterAlreadyRunning as e:
                on_lost(str(e))
                return
            except Exception as e:  # the database is still away: try again next time
                log.warning("cannot re-take the master's database lock yet: %s", e)
                continue
            log.info("the master's database lock is held again")
