"""Shared fixtures: a fresh PostgreSQL database per test, and a real cluster of processes."""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import Cluster, create_pg_database, drop_pg_database

# Skipped tests fail the run unless opted out (DET_SKIP_DOCKER_SETUP=1, DET_SKIP_TMUX_TESTS=1).
pytest_plugins = ["tests.skipguard"]

# Seconds the test process may take to exit after the last test before its threads are dumped and
# it exits 1: a run that prints all passes and then hangs is a failure, with a trace.
EXIT_GRACE_S = 120


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


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:  # type: ignore[no-untyped-def]
    # Cancelled only by the process exiting: dumps every thread's stack and exits 1 on a hang.
    faulthandler.dump_traceback_later(EXIT_GRACE_S, exit=True, file=sys.__stderr__)
