"""Migration 0017 on a database with data: existing tasks keep everything and have no context;
a context's chunks go with their task; a downgrade drops the table and both columns."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from master.db import normalize_db_url
from master.migrate import alembic_config


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_0017_adds_task_contexts(backend: str, empty_pg_url: str, tmp_path: Path) -> None:
    url = normalize_db_url(empty_pg_url) if backend == "postgres" else f"sqlite:///{tmp_path}/m.db"
    engine = create_engine(url)
    cfg = alembic_config()

    def migrate(to: str, up: bool = True) -> None:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            (command.upgrade if up else command.downgrade)(cfg, to)

    migrate("0016")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO tasks (id, type, state, name, preemptible, created_at) "
                "VALUES ('old', 'COMMAND', 'COMPLETED', 'ls', false, CURRENT_TIMESTAMP)"
            )
        )
    migrate("0017")
    with engine.begin() as conn:
        row = conn.execute(text("SELECT name, context_sha256, context_size FROM tasks")).one()
        assert tuple(row) == ("ls", None, None)
        conn.execute(
            text("INSERT INTO task_context_chunks (task_id, seq, data) VALUES ('old', 0, :d)"),
            {"d": b"\x1f\x8b"},
        )
        if backend == "postgres":  # SQLite enforces foreign keys only where a connection asks
            conn.execute(text("DELETE FROM tasks WHERE id = 'old'"))
            chunks = conn.execute(text("SELECT count(*) FROM task_context_chunks")).scalar_one()
            assert chunks == 0
    migrate("0016", up=False)
    with engine.connect() as conn:
        columns = list(conn.execute(text("SELECT * FROM tasks")).keys())
        assert "context_sha256" not in columns and "context_size" not in columns
        with pytest.raises(Exception, match="task_context_chunks"):
            conn.execute(text("SELECT * FROM task_context_chunks"))
    engine.dispose()
