"""Writes that take the master's state lock commit before they let it go.

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

from flask import Flask
from sqlalchemy import event
from sqlalchemy.orm import Session

from master.context import EXTENSION
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
