"""Shared fixtures: a fresh PostgreSQL database per test, and a real cluster of processes."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from master import lock_order
from tests import xdist_groups
from tests.cluster import (
    Cluster,
    cluster_dir,
    create_pg_database,
    drop_pg_database,
    release_cluster_dir,
)

# Every master the tests start, in process or not, checks its lock order (master/lock_order.py):
# a transaction taking the state lock after writing raises instead of deadlocking on SQLite now
# and then.
os.environ[lock_order.ENV] = "1"

# Skipped tests fail the run unless opted out (DET_SKIP_DOCKER_SETUP=1, DET_SKIP_TMUX_TESTS=1).
pytest_plugins = ["tests.skipguard"]

# Seconds the test process may take to exit after the last test before its threads are dumped and
# it exits 1: a run that prints all passes and then hangs is a failure, with a trace.
EXIT_GRACE_S = 120


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh database with every migration applied (a copy of tests/pgtemplate.py's template)."""
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def empty_pg_url() -> Iterator[str]:
    """A fresh, empty database: for the tests that run migrations themselves."""
    url = create_pg_database(migrated=False)
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator:
    """Make clusters on PostgreSQL (the default) or SQLite (`db="sqlite"`). A PostgreSQL database
    is a copy of the migrated template unless `migrated=False` (an empty one, as on a first start:
    the master runs every migration)."""
    made: list[tuple[Cluster, str | None]] = []

    def make(
        db: str = "postgres",
        agent_timeout: float = 30.0,
        master_yaml: str | None = None,
        start: bool = True,
        migrated: bool = True,
    ) -> Cluster:
        url = create_pg_database(migrated=migrated) if db == "postgres" else None
        sub = cluster_dir(tmp_path, f"cluster{len(made)}")
        c = Cluster(sub, url, agent_timeout=agent_timeout, master_yaml=master_yaml)
        made.append((c, url))
        if start:
            c.start_master()
        return c

    yield make
    broken = []
    for i, (c, url) in enumerate(made):
        c.stop()
        if "LockOrderError" in c.read_log("master"):
            broken.append(f"cluster{i}")
        if url:
            drop_pg_database(url)
        release_cluster_dir(tmp_path, f"cluster{i}")
    if broken:  # its log is kept in tmp_path/clusterN/master.log
        pytest.fail(f"the master of {', '.join(broken)} broke its lock order (LockOrderError)")


@pytest.fixture
def cluster(cluster_factory) -> Cluster:  # type: ignore[no-untyped-def]
    c = cluster_factory()
    c.start_agent("agent-1", slots=1)
    return c


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    # A run started as a background job of a non-interactive shell (`scripts/test > log &`, some
    # CI runners) inherits SIGINT *ignored*; Python leaves an ignored SIGINT ignored, and so does
    # every det, master and agent the tests start. The tests send SIGINT as Ctrl-C reaches a
    # program started from a terminal, whose SIGINT is at its default: a `det ... -f` that ignored
    # it never exited (test_ctrl_c_while_following_leaves_the_experiment_running, 60 s). Restored
    # here, so the processes the tests start take SIGINT as a user's would.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# tryfirst: pytest-xdist reads the xdist_group markers in its own collection hook.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    for item in items:
        # A test that starts a cluster of processes is an integration test whatever its file
        # says: scripts/test-quick leaves these out by that marker.
        if "cluster_factory" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
        # Tests that share one thing of the machine run on one xdist worker (--dist loadgroup).
        group = xdist_groups.group_for(item.nodeid, {m.name for m in item.iter_markers()})
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_report_header(config) -> str:  # type: ignore[no-untyped-def]
    return f"detlab tests: PostgreSQL at {os.environ.get('DET_TEST_DB_URL', '127.0.0.1:5432')}"


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:  # type: ignore[no-untyped-def]
    # Not in a pytest-xdist worker: a worker unconfigures when its own tests are done, then stays
    # up until the controller ends the session, which waits for the slowest worker; armed there,
    # the watchdog killed a worker that had finished early (exit 1, "Timeout (0:02:00)!").
    # The controller arms it once every worker has gone.
    if hasattr(config, "workerinput"):
        return
    # Cancelled only by the process exiting: dumps every thread's stack and exits 1 on a hang.
    faulthandler.dump_traceback_later(EXIT_GRACE_S, exit=True, file=sys.__stderr__)
