"""Migration 0011 on a database with data: every trial gets its task (Determined's
`<experiment id>.<request id>`), born in state_changes; allocations and log lines keep every row
and point at their trial's task; the downgrade gives back the schema and rows it had."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from master.db import normalize_db_url
from master.migrate import alembic_config


def _seed(conn) -> None:  # type: ignore[no-untyped-def]
    conn.execute(
        text(
            "INSERT INTO users (id, username, password_hash, admin, active, created_at) "
            "VALUES (7, 'u', 'x', false, true, CURRENT_TIMESTAMP)"
        )
    )
    conn.execute(
        text(
            "INSERT INTO experiments (id, name, state, owner_id, config, original_config, "
            "seed, progress, resource_pool, priority, weight, created_at) VALUES "
            "(3, 'e', 'ACTIVE', 7, '{}', '', 1, 0, 'default', 42, 1, CURRENT_TIMESTAMP)"
        )
    )
    for trial_id, request_id, state in ((1, "r-a", "ACTIVE"), (2, "r-b", "COMPLETED")):
        conn.execute(
            text(
                "INSERT INTO trials (id, experiment_id, request_id, state, hparams, seed, "
                "restarts, steps_completed, searcher_target, searcher_completed, closing, "
                "progress, created_at, ended_at) VALUES (:i, 3, :r, :s, '{}', 1, 0, 0, 0, 0, "
                "false, 0, CURRENT_TIMESTAMP, NULL)"
            ),
            {"i": trial_id, "r": request_id, "s": state},
        )
    for alloc_id, trial_id, state in (("a1", 1, "RUNNING"), ("a2", 2, "TERMINATED")):
        conn.execute(
            text(
                "INSERT INTO allocations (id, trial_id, agent_id, state, slot_indexes, "
                "preempt_requested, kill_requested, created_at) VALUES "
                "(:a, :t, 'agent-1', :s, '[0]', false, false, CURRENT_TIMESTAMP)"
            ),
            {"a": alloc_id, "t": trial_id, "s": state},
        )
    for n in range(5):
        conn.execute(
            text(
                "INSERT INTO task_logs (trial_id, allocation_id, agent_id, timestamp, stream, "
                "line) VALUES (:t, 'a1', 'agent-1', CURRENT_TIMESTAMP, 'stdout', :l)"
            ),
            {"t": 1 + n % 2, "l": f"line {n}"},
        )


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_0011_gives_every_trial_a_task_and_keeps_rows(
    backend: str, empty_pg_url: str, tmp_path: Path
) -> None:
    url = normalize_db_url(empty_pg_url) if backend == "postgres" else f"sqlite:///{tmp_path}/m.db"
    engine = create_engine(url)
    cfg = alembic_config()

    def migrate(to: str, up: bool = True) -> None:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            (command.upgrade if up else command.downgrade)(cfg, to)

    migrate("0010")
    with engine.begin() as conn:
        _seed(conn)
        logs_before = conn.execute(
            text("SELECT id, trial_id, line FROM task_logs ORDER BY id")
        ).all()

    migrate("0011")
    with engine.connect() as conn:
        tasks = conn.execute(
            text("SELECT id, type, state, owner_id, trial_id, name FROM tasks ORDER BY trial_id")
        ).all()
        assert [tuple(t) for t in tasks] == [
            ("3.r-a", "TRIAL", "ACTIVE", 7, 1, "Trial 1 (Experiment 3)"),
            ("3.r-b", "TRIAL", "COMPLETED", 7, 2, "Trial 2 (Experiment 3)"),
        ]
        allocs = dict(conn.execute(text("SELECT id, task_id FROM allocations")).all())
        assert allocs == {"a1": "3.r-a", "a2": "3.r-b"}
        births = conn.execute(
            text(
                "SELECT entity_id, from_state, to_state FROM state_changes "
                "WHERE entity = 'task' ORDER BY entity_id"
            )
        ).all()
        assert [tuple(b) for b in births] == [
            ("3.r-a", None, "ACTIVE"),
            ("3.r-b", None, "COMPLETED"),
        ]
        assert (
            conn.execute(text("SELECT id, trial_id, line FROM task_logs ORDER BY id")).all()
            == logs_before
        )

    migrate("0010", up=False)
    with engine.connect() as conn:
        cols = conn.execute(text("SELECT * FROM allocations")).keys()
        assert "task_id" not in cols
        assert sorted(conn.execute(text("SELECT id FROM allocations")).scalars()) == ["a1", "a2"]
        assert (
            conn.execute(text("SELECT id, trial_id, line FROM task_logs ORDER BY id")).all()
            == logs_before
        )
        assert conn.execute(text("SELECT count(*) FROM state_changes")).scalar_one() == 0
    migrate("head")  # and up again
    engine.dispose()
