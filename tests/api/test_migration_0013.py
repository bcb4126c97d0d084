"""Migration 0013 on a database with data: existing templates belong to the admin, existing
tokens stay API tokens (and a downgrade drops both columns)."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from master.db import normalize_db_url
from master.migrate import alembic_config


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_0013_gives_templates_to_the_admin(backend: str, empty_pg_url: str, tmp_path: Path) -> None:
    url = normalize_db_url(empty_pg_url) if backend == "postgres" else f"sqlite:///{tmp_path}/m.db"
    engine = create_engine(url)
    cfg = alembic_config()

    def migrate(to: str, up: bool = True) -> None:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            (command.upgrade if up else command.downgrade)(cfg, to)

    migrate("0012")
    with engine.begin() as conn:
        for uid, name, admin in ((1, "bob", False), (2, "admin", True), (3, "root", True)):
            conn.execute(
                text(
                    "INSERT INTO users (id, username, password_hash, admin, active, created_at) "
                    "VALUES (:i, :n, 'x', :a, true, CURRENT_TIMESTAMP)"
                ),
                {"i": uid, "n": name, "a": admin},
            )
        conn.execute(
            text(
                "INSERT INTO config_templates (name, config, created_at, updated_at) "
                "VALUES ('t', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO auth_tokens (token_hash, user_id, created_at, revoked) "
                "VALUES ('h', 1, CURRENT_TIMESTAMP, false)"
            )
        )
    migrate("0013")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT owner_id FROM config_templates")).scalar_one() == 2
        assert conn.execute(text("SELECT kind FROM auth_tokens")).scalar_one() == "api"
    migrate("0012", up=False)
    with engine.connect() as conn:
        templates = list(conn.execute(text("SELECT * FROM config_templates")).keys())
        tokens = list(conn.execute(text("SELECT * FROM auth_tokens")).keys())
        assert "owner_id" not in templates and "kind" not in tokens
    engine.dispose()
