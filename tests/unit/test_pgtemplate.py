"""tests/pgtemplate.py: the migrated template every test database is copied from."""

from __future__ import annotations

import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg2
import pytest

from master.migrate import MIGRATIONS
from tests import pgtemplate
from tests.cluster import create_pg_database, drop_pg_database, pg_admin_url


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    from master.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head
    return head


def query(url: str, sql: str) -> list[tuple]:
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def test_a_copy_is_at_the_head_migration_and_an_empty_one_is_empty() -> None:
    url, empty = create_pg_database(), create_pg_database(migrated=False)
    try:
        assert query(url, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
        tables = {r[0] for r in query(url, "SELECT tablename FROM pg_tables")}
        assert {"experiments", "trials", "users"} <= tables
        assert not query(empty, "SELECT 1 FROM pg_tables WHERE schemaname = 'public'")
    finally:
        drop_pg_database(url)
        drop_pg_database(empty)


def test_a_changed_migration_gets_another_template(tmp_path: Path) -> None:
    shutil.copytree(MIGRATIONS, tmp_path / "master" / "migrations")
    shutil.copy(MIGRATIONS.parent / "migrate.py", tmp_path / "master" / "migrate.py")
    same = pgtemplate.template_name(tmp_path)
    assert same == pgtemplate.template_name()
    env = tmp_path / "master" / "migrations" / "env.py"
    env.write_text(env.read_text() + "\n# changed\n")
    assert pgtemplate.template_name(tmp_path) != same


def test_makers_racing_for_a_new_template_make_one(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"detlab_tmpl_test_{uuid.uuid4().hex[:8]}"
    admin = pg_admin_url()
    try:
        with ThreadPoolExecutor(4) as pool:
            made = list(pool.map(lambda _: pgtemplate.ensure_template(admin, name), range(4)))
        assert made == [name] * 4
        rows = query(
            admin, f"SELECT datname, datistemplate FROM pg_database WHERE datname LIKE '{name}%'"
        )
        assert rows == [(name, True)]  # nothing left half-built under a temporary name
    finally:
        conn = psycopg2.connect(admin)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE false')
            cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.close()
