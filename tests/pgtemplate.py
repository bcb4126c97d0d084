"""A migrated PostgreSQL database per test without running every migration per test.

Running the migrations takes seconds (3.3 s on a loaded 2-core machine); copying a migrated database
with `CREATE DATABASE ... TEMPLATE` takes a tenth of that. The template is made once, by whichever
test process (pytest, an xdist worker) gets there first, and kept between runs: its name carries a
hash of master/migrations and master/migrate.py, so a changed migration makes a new template and a
stale one is never used. Every developer's worktree shares the one PostgreSQL server: a branch with
other migrations gets another name, and no template is ever dropped here (another run may be
copying it).

Safe when several processes start at once: one session-level advisory lock serialises the makers,
and a template is built under a temporary name and renamed when complete, so a maker killed halfway
leaves nothing that looks finished.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("master/migrations", "master/migrate.py")
PREFIX = "detlab_tmpl_"
# pg_advisory_lock key: any constant the project does not use elsewhere ("detlab tm").
LOCK_KEY = 0x6465746C6174_6D

_made: dict[str, str] = {}  # admin URL -> this process's template name


def migrations_hash(root: Path = ROOT) -> str:
    """A digest of every file the migrated schema depends on (names and bytes)."""
    h = hashlib.sha256()
    for src in (root / s for s in SOURCES):
        files = sorted(src.rglob("*")) if src.is_dir() else [src]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def template_name(root: Path = ROOT) -> str:
    return PREFIX + migrations_hash(root)


def ensure_template(admin_url: str, name: str | None = None) -> str:
    """The migrated template's name, made first if it does not exist yet (`name`: tests only)."""
    default = name is None
    if default and admin_url in _made:
        return _made[admin_url]
    import psycopg2

    name = name or template_name()
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
            try:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    _build(cur, admin_url, name)
            finally:
                cur.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    finally:
        conn.close()
    if default:
        _made[admin_url] = name
    return name


def _build(cur: Any, admin_url: str, name: str) -> None:
    from sqlalchemy import create_engine, pool

    from master.db import normalize_db_url
    from master.migrate import upgrade

    building = f"{name}_building_{uuid.uuid4().hex[:8]}"
    cur.execute(f'CREATE DATABASE "{building}"')
    try:
        engine = create_engine(
            normalize_db_url(db_url(admin_url, building)), poolclass=pool.NullPool
        )
        try:
            upgrade(engine)
        finally:
            engine.dispose()
        cur.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        cur.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE true')
    except BaseException:
        cur.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
        raise


def db_url(admin_url: str, name: str) -> str:
    return f"{admin_url.rsplit('/', 1)[0]}/{name}"


def create_from_template(admin_url: str, name: str, attempts: int = 20) -> None:
    """`CREATE DATABASE name TEMPLATE <migrated>`. PostgreSQL refuses to copy a database another
    session is connected to; nothing but a maker connects to the template, and that only before it
    has its final name, so a refusal is retried a few times rather than trusted to never happen."""
    import psycopg2

    template = ensure_template(admin_url)
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for attempt in range(attempts):
                try:
                    cur.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                    return
                except psycopg2.errors.ObjectInUse:
                    if attempt == attempts - 1:
                        raise
                    time.sleep(0.1 * (attempt + 1))
    finally:
        conn.close()
