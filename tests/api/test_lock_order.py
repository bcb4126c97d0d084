"""The master's lock order: a transaction takes the state lock before its first write
(master/lock_order.py), and commits before it lets the lock go.

On SQLite a transaction's first write takes the database's one write lock: a request that wrote
and then waited for the state lock deadlocked with the lock's holder as soon as that one wrote,
both waiting out SQLite's 30 s busy timeout (`det notebook start` timed out in a CI run: a
notebook's task row was inserted before the lock was taken).

The state lock orders the master's writers; PostgreSQL's row locks order their transactions. A
transaction that flushed a row under the state lock and commits after releasing it still holds
that row: a writer that takes the state lock next and needs the same rows in another order
deadlocks with it. PostgreSQL aborts one of the two (503 to its caller): in a loaded test run a
trial's progress report (its trial row, then its experiment's) met a kill (the experiment's row,
then its trials').
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import event, text, update
from sqlalchemy.orm import Session

from master import lock_order
from master.config import MasterConfig
from master.context import EXTENSION, state_lock
from master.db import db
from master.lock_order import LockOrderError
from master.models import User
from tests.api.conftest import login, start_one, submit, trial_auth
from tests.cluster import wait_for


class WatchedLock:
    """The state lock, saying which threads wait for it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.waiting: set[int] = set()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = threading.get_ident()
        self.waiting.add(me)
        try:
            return self._lock.acquire(blocking, timeout)
        finally:
            self.waiting.discard(me)

    def release(self) -> None:
        self._lock.release()

    def _is_owned(self) -> bool:  # what master/lock_order.py asks of the state lock
        return bool(self._lock._is_owned())  # type: ignore[attr-defined]

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _waits_in_postgres(app: Flask) -> bool:
    from sqlalchemy import text

    from master.db import db

    with app.app_context():
        n = db.session.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
        db.session.rollback()
        return bool(n)


def test_a_progress_report_and_a_kill_at_once_both_go_through(app: Flask) -> None:
    client = app.test_client()
    admin = login(client)
    exp_id = submit(client, admin)["experiment"]["id"]
    spec = start_one(app, client)
    trial_id = spec.get("trial_id") or int(spec["env"]["DET_TRIAL_ID"])
    lock = WatchedLock()
    app.extensions[EXTENSION].state_lock = lock

    at_commit, go = threading.Event(), threading.Event()
    reporter: dict[str, Any] = {}
    killer: dict[str, Any] = {}

    def hold_the_reports_commit(session: Session) -> None:
        if threading.get_ident() == reporter.get("ident"):
            at_commit.set()
            assert go.wait(30)

    def report() -> None:
        reporter["ident"] = threading.get_ident()
        r = app.test_client().post(
            f"/api/v1/trials/{trial_id}/progress",
            json={"progress": 0.5},
            headers=trial_auth(spec),
        )
        reporter["status"], reporter["body"] = r.status_code, r.json

    def kill() -> None:
        killer["ident"] = threading.get_ident()
        r = app.test_client().post(f"/api/v1/experiments/{exp_id}/kill", headers=admin)
        killer["status"], killer["body"] = r.status_code, r.json

    event.listen(Session, "before_commit", hold_the_reports_commit)
    try:
        a = threading.Thread(target=report)
        a.start()
        assert at_commit.wait(30), "the progress report never reached its commit"
        b = threading.Thread(target=kill)
        b.start()

        # The kill goes as far as it can: to the state lock (the report still holds it), or,
        # were the lock let go before the commit, into PostgreSQL behind the report's trial row.
        def kill_is_blocked() -> bool:
            assert b.is_alive(), killer  # a kill that finished first would prove nothing
            return killer.get("ident") in lock.waiting or _waits_in_postgres(app)

        wait_for(kill_is_blocked, 30, 0.01, what="the kill to block")
        go.set()
        a.join(30)
        b.join(30)
    finally:
        go.set()
        event.remove(Session, "before_commit", hold_the_reports_commit)
    assert reporter["status"] == 200, reporter
    assert killer["status"] == 200, killer
    c = client.get(f"/api/v1/experiments/{exp_id}", headers=admin).json
    assert c["experiment"]["state"] in ("STOPPING_CANCELED", "CANCELED")
    assert c["trials"][0]["progress"] == 0.5


@pytest.fixture
def sqlite_app(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The master app on its embedded SQLite database."""
    from master.app import create_app, prepare_database

    monkeypatch.setenv("DET_AGENT_TOKEN", "agent-secret")
    monkeypatch.setenv("DET_ADMIN_PASSWORD", "admin-password")
    app = create_app(MasterConfig(data_dir=tmp_path / "data", agent_timeout=30))
    prepare_database(app)
    yield app
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


@pytest.mark.parametrize("route", ["notebooks", "shells", "commands"])
def test_a_task_created_while_the_lock_holder_writes_on_sqlite_waits_only_for_the_lock(
    sqlite_app: Flask, route: str
) -> None:
    """The request waits for the state lock before it writes, so the holder's own write goes
    through at once; before, the task row was inserted first, and the holder's write waited out
    SQLite's busy timeout (30 s; 2 s here) and failed 'database is locked'."""
    app = sqlite_app
    client = app.test_client()
    admin = login(client)
    lock = WatchedLock()
    app.extensions[EXTENSION].state_lock = lock
    body: dict[str, Any] = {"config": {}}
    if route == "commands":
        body = {"config": {"entrypoint": ["true"]}}
    creator: dict[str, Any] = {}

    def create() -> None:
        creator["ident"] = threading.get_ident()
        r = app.test_client().post(f"/api/v1/{route}", json=body, headers=admin)
        creator["status"], creator["body"] = r.status_code, r.json

    with app.app_context(), lock:
        b = threading.Thread(target=create)
        b.start()
        wait_for(lambda: creator.get("ident") in lock.waiting, 30, 0.01, what="the request to wait")
        db.session.execute(text("PRAGMA busy_timeout=2000"))
        db.session.execute(update(User).where(User.username == "admin").values(agent_user="A"))
        db.session.commit()
    b.join(30)
    assert creator["status"] in (200, 201), creator


def test_the_check_refuses_the_state_lock_after_a_write(app: Flask) -> None:
    """`DET_CHECK_LOCK_ORDER=1` (the suite runs with it): the state lock taken after the
    transaction's first write raises, naming the write; reading first, re-entering the held
    lock, or writing after a commit is fine."""
    app.extensions[EXTENSION].check_lock_order = True
    admin_row = update(User).where(User.username == "admin")
    with app.app_context():
        lock_order.watch(db.engine)  # once per engine: a no-op where the app already watches
        db.session.execute(text("SELECT 1"))
        with state_lock():  # read first: fine
            db.session.execute(admin_row.values(agent_user="A"))
            with state_lock():  # re-entered while held: waits for no one
                pass
            db.session.commit()
        db.session.execute(admin_row.values(agent_user="B"))
        with pytest.raises(LockOrderError, match="UPDATE users"):
            state_lock()
        db.session.rollback()
        with state_lock():  # the rollback ended that transaction
            pass
        db.session.execute(admin_row.values(agent_user="C"))
        db.session.commit()
        with state_lock():  # and so does a commit
            pass
