"""One master per database: the second one is refused with a message that says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from master.instance_lock import MasterAlreadyRunning, MasterLock
from tests.cluster import wait_for

REPO = Path(__file__).resolve().parents[2]


def test_postgres_second_master_is_refused_until_the_first_lets_go(pg_url: str) -> None:
    first = MasterLock(pg_url)
    try:
        with pytest.raises(MasterAlreadyRunning, match="another detlab master .* is using"):
            MasterLock(pg_url)
    finally:
        first.release()
    MasterLock(pg_url).release()  # free again


def test_sqlite_second_master_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'detlab.db'}"
    first = MasterLock(url)
    try:
        with pytest.raises(MasterAlreadyRunning, match=r"pid \d+\) is using the database"):
            MasterLock(url)
    finally:
        first.release()
    MasterLock(url).release()
    MasterLock("sqlite://").release()  # in-memory: nothing to share, nothing to lock


def test_det_master_refuses_a_database_another_master_holds(pg_url: str, tmp_path: Path) -> None:
    holder = MasterLock(pg_url)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "master.main", "--db", pg_url, "--port", "0"]
            + ["--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
    finally:
        holder.release()
    assert r.returncode == 1
    assert "another detlab master" in r.stderr and "Traceback" not in r.stderr


def test_a_master_that_loses_its_lock_to_another_one_stops(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg2

    from master import instance_lock

    monkeypatch.setattr(instance_lock, "CHECK_EVERY_S", 0.05)
    first = MasterLock(pg_url)
    admin = psycopg2.connect(pg_url)
    admin.autocommit = True
    with admin.cursor() as cur:  # the database drops the first master's lock session
        cur.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE application_name = 'detlab-master' AND datname = current_database()"
        )
        pids = [row[0] for row in cur.fetchall()]
        assert pids, "the first master's lock session is not in pg_stat_activity"
        cur.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s) AS pid", (pids,))

        # pg_terminate_backend returns once the signal is sent, not once the session has ended:
        # its advisory lock can still be held a moment later (a fresh clone's unit run took the
        # second lock too soon and got MasterAlreadyRunning). Wait for the lock itself to go.
        def lock_gone() -> bool:
            cur.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = ANY(%s)",
                (pids,),
            )
            return cur.fetchone()[0] == 0

        wait_for(lock_gone, timeout=30, interval=0.02, what="the killed session's lock to go")
    admin.close()
    second = MasterLock(pg_url)  # ... and another master takes the database meanwhile
    reasons: list[str] = []
    try:
        first._watch(reasons.append)  # the watcher's loop, run here: returns once it gives up
    finally:
        second.release()
        first.release()
    assert len(reasons) == 1 and "another detlab master" in reasons[0]
