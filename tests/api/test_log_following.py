"""Log following at scale: many live followers of one trial share its log tail, so the database
work per new line per follower is far below one query (in-process master on PostgreSQL)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import event

from master.db import db
from master.log_tail import TrialTail
from tests.api.conftest import AGENT, login, start_one, submit

FOLLOWERS = 20
LINES = 30


def test_trial_tail_bookkeeping() -> None:
    tail = TrialTail(capacity=3)
    tail.start_at(10)
    assert tail.after(10, 100) == [] and tail.after(9, 100) is None
    tail.add([{"seq": s} for s in (11, 12)])
    assert [r["seq"] for r in tail.after(10, 100)] == [11, 12]
    assert [r["seq"] for r in tail.after(11, 100)] == [12]
    tail.add([{"seq": s} for s in (12, 13, 14)])  # 12 again is ignored
    assert [r["seq"] for r in tail.lines] == [12, 13, 14] and tail.covered_from == 11
    assert tail.after(10, 100) is None  # line 11 is gone from memory: read from the database
    assert [r["seq"] for r in tail.after(11, 2)] == [12, 13]
    small = TrialTail(max_bytes=10)
    small.start_at(0)
    small.add([{"seq": 1, "line": "x" * 6}, {"seq": 2, "line": "y" * 6}])
    assert [r["seq"] for r in small.lines] == [2] and small.covered_from == 1
    assert small.after(0, 10) is None and small.after(1, 10) == [{"seq": 2, "line": "yyyyyy"}]


def test_many_followers_cost_far_less_than_a_query_per_line(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    submit(client, auth)
    spec = start_one(app, client)
    tid, alloc = spec["trial_id"], spec["allocation_id"]
    got: dict[int, list[str]] = {i: [] for i in range(FOLLOWERS)}
    cond = threading.Condition()
    follower_threads: set[int] = set()
    errors: list[str] = []

    def follow(i: int) -> None:
        with cond:
            follower_threads.add(threading.get_ident())
        c = app.test_client()
        after = 0
        while len(got[i]) < LINES and not errors:
            r = c.get(
                f"/api/v1/trials/{tid}/logs?after={after}&follow=true&timeout=10", headers=auth
            )
            if r.status_code != 200:
                errors.append(f"{r.status_code} {r.json}")
                return
            page = r.json
            with cond:
                # The master's own lines (the trial starting) are in the log too.
                got[i].extend(x["line"] for x in page["logs"] if x["stream"] == "stdout")
                cond.notify_all()
            after = page["last_seq"]

    with app.app_context():
        engine = db.engine
    queries: list[int] = []

    def count(*args: object) -> None:
        if threading.get_ident() in follower_threads:
            queries.append(1)

    event.listen(engine, "before_cursor_execute", count)
    threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(FOLLOWERS)]
    try:
        for t in threads:
            t.start()
        # One line at a time, the next only when every follower has the previous one: each line
        # is a separate wake-up of every follower (the costliest pattern for the database).
        for n in range(LINES):
            r = client.post(
                "/api/v1/agents/a1/logs",
                json={
                    "logs": [
                        {
                            "allocation_id": alloc,
                            "timestamp": datetime.now(UTC).isoformat(),
                            "stream": "stdout",
                            "line": f"line {n}",
                        }
                    ]
                },
                headers=AGENT,
            )
            assert r.status_code == 200, r.json
            with cond:
                assert cond.wait_for(
                    lambda n=n: errors or all(len(v) > n for v in got.values()), timeout=60
                ), {i: len(v) for i, v in got.items()}
        for t in threads:
            t.join(60)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert not errors, errors
    expected = [f"line {n}" for n in range(LINES)]
    assert all(v == expected for v in got.values())
    per_line_per_follower = len(queries) / (LINES * FOLLOWERS)
    print(f"{len(queries)} queries for {LINES} lines x {FOLLOWERS} followers")
    # Before the shared tail: about 4 per line per follower (2.4 at the very least).
    assert per_line_per_follower < 0.15, (len(queries), per_line_per_follower)
