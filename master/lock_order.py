"""The master's one lock-order rule, and a check of it: a transaction takes the state lock
(`master.context.state_lock`) before its first write, never after.

Why: on SQLite the first INSERT, UPDATE or DELETE of a transaction takes the database's single
write lock until the commit. A thread holding it that then waits for the state lock deadlocks
with the holder of the state lock as soon as that one writes: each waits for the other until
SQLite's busy_timeout (30 s), the whole master stalls (agents' polls, the scheduler, every
request), and one of them fails "database unavailable". Seen as `det notebook start` timing out
in a CI run: creating a notebook inserted its task row outside the lock and took the lock after.
PostgreSQL has no single write lock, but one rule for both databases keeps the order checkable.

`DET_CHECK_LOCK_ORDER=1` (the test suite sets it) turns the check on: `state_lock()` then raises
`LockOrderError` when taken, not already held, by a transaction that has written. The watcher
looks at every statement's first word, so production masters leave it off.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

ENV = "DET_CHECK_LOCK_ORDER"
_WROTE = "det_wrote"  # key in the DB-API connection's info: the first write of its transaction
_WRITES = ("INSERT", "UPDATE", "DELETE")


class LockOrderError(RuntimeError):
    """The state lock was taken after the transaction's first write (see the module's doc)."""


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def watch(engine: Engine) -> None:
    """Remember, per connection, whether its open transaction has written (once per engine)."""
    for name, fn in _LISTENERS:
        if not event.contains(engine, name, fn):
            event.listen(engine, name, fn)


def _mark(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
    if _WROTE not in conn.info and statement.lstrip()[:6].upper() in _WRITES:
        conn.info[_WROTE] = statement.strip()[:120]


def _clear(conn: Any, *_: Any) -> None:
    conn.info.pop(_WROTE, None)


def _clear_record(_dbapi_conn: Any, record: Any, *_: Any) -> None:
    record.info.pop(_WROTE, None)  # a connection rolled back on its way into the pool


_LISTENERS = (
    ("before_cursor_execute", _mark),
    ("commit", _clear),
    ("rollback", _clear),
    ("reset", _clear_record),
)


def first_write(session: Any) -> str | None:
    """The first write of `session`'s open transaction (None: it has not written)."""
    if not session.in_transaction():
        return None
    return session.connection().info.get(_WROTE)


def check(lock: threading.RLock, session: Any) -> None:
    """Raise `LockOrderError` if this thread is about to wait for `lock` after writing."""
    if _held_here(lock):
        return  # re-entering a lock this thread holds waits for no one
    wrote = first_write(session)
    if wrote is not None:
        raise LockOrderError(
            "the state lock was requested after this transaction wrote "
            f"({wrote!r}): take state_lock() before the first write (master/lock_order.py)"
        )


def _held_here(lock: threading.RLock) -> bool:
    # RLock's ownership test; threading.Condition relies on the same method.
    return bool(lock._is_owned())  # type: ignore[attr-defined]
