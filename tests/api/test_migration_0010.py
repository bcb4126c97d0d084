"""Migration 0010 on a database with data: model definitions move out of `experiments` into
chunks byte for byte (and back on downgrade); existing metrics count (not superseded)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from master.db import normalize_db_url
from master.migrate import alembic_config


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_0010_moves_model_definitions_and_keeps_metrics(
    backend: str, empty_pg_url: str, tmp_path: Path
) -> None:
    url = normalize_db_url(empty_pg_url) if backend == "postgres" else f"sqlite:///{tmp_path}/m.db"
    engine = create_engine(url)
    blob = os.urandom(2 * (1 << 20) + 123)  # three chunks
    cfg = alembic_config()

    def migrate(to: str, up: bool = True) -> None:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            (command.upgrade if up else command.downgrade)(cfg, to)

    migrate("0009")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (id, username, password_hash, admin, active, created_at) "
                "VALUES (1, 'u', 'x', false, true, CURRENT_TIMESTAMP)"
            )
        )
        for exp_id, model_def in ((1, blob), (2, None)):
            conn.execute(
                text(
                    "INSERT INTO experiments (id, name, state, owner_id, config, original_config, "
                    "model_def, model_def_sha256, seed, progress, resource_pool, priority, "
                    "weight, created_at) VALUES (:i, 'e', 'ACTIVE', 1, '{}', '', :b, :s, 1, 0, "
                    "'default', 42, 1, CURRENT_TIMESTAMP)"
                ),
                {"i": exp_id, "b": model_def, "s": "abc" if model_def else None},
            )
        conn.execute(
            text(
                "INSERT INTO trials (id, experiment_id, request_id, state, hparams, seed, "
                "restarts, steps_completed, searcher_target, searcher_completed, closing, "
                "progress, created_at) VALUES (1, 1, 'r', 'ACTIVE', '{}', 1, 0, 0, 0, 0, false, "
                "0, CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                'INSERT INTO metrics (trial_id, "group", steps_completed, metrics, reported_at) '
                "VALUES (1, 'training', 1, '{}', CURRENT_TIMESTAMP)"
            )
        )

    migrate("head")
    with engine.connect() as conn:
        parts = conn.execute(
            text("SELECT data FROM model_def_chunks WHERE experiment_id = 1 ORDER BY seq")
        ).scalars()
        assert b"".join(bytes(p) for p in parts) == blob
        sizes = dict(conn.execute(text("SELECT id, model_def_size FROM experiments")).all())
        assert sizes == {1: len(blob), 2: None}
        assert conn.execute(text("SELECT superseded FROM metrics")).scalar_one() in (False, 0)
        cols = conn.execute(text("SELECT * FROM experiments")).keys()
        assert "model_def" not in cols

    migrate("0009", up=False)
    with engine.connect() as conn:
        got = dict(conn.execute(text("SELECT id, model_def FROM experiments")).all())
        assert bytes(got[1]) == blob and got[2] is None
    engine.dispose()
