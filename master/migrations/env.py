"""Alembic environment: runs on the connection the master hands over (or a URL for the CLI)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, engine_from_config, pool

from master import models  # noqa: F401  (registers every table on the metadata)
from master.db import db

config = context.config
target_metadata = db.metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section) or {},
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        _run_on(conn)


def _run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run()
