"""Shared fixtures: a fresh PostgreSQL database per test, and a real cluster of processes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import Cluster, create_pg_database, drop_pg_database


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator:
    """Make clusters on PostgreSQL (the default) or SQLite (`db="sqlite"`)."""
    made: list[tuple[Cluster, str | None]] = []

    def make(
        db: str = "postgres",
        agent_timeout: float = 30.0,
        master_yaml: str | None = None,
        start: bool = True,
    ) -> Cluster:
        url = create_pg_database() if db == "postgres" else None
        sub = tmp_path / f"cluster{len(made)}"
        sub.mkdir()
        c = Cluster(sub, url, agent_timeout=agent_timeout, master_yaml=master_yaml)
        made.append((c, url))
        if start:
            c.start_master()
        return c

    yield make
    for c, url in made:
        c.stop()
        if url:
            drop_pg_database(url)


@pytest.fixture
def cluster(cluster_factory) -> Cluster:  # type: ignore[no-untyped-def]
    c = cluster_factory()
    c.start_agent("agent-1", slots=1)
    return c


def pytest_report_header(config) -> str:  # type: ignore[no-untyped-def]
    return f"detlab tests: PostgreSQL at {os.environ.get('DET_TEST_DB_URL', '127.0.0.1:5432')}"
