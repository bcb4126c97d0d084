"""Idle notebooks are stopped and their slots freed; a busy one never is (issue 38)."""

from __future__ import annotations

import time

import pytest

from tests.cluster import Cluster, wait_for
from tests.notebooks._nb import base_url, execute, kernel_socket, new_kernel, start_notebook

pytestmark = pytest.mark.integration


def notebook(cluster: Cluster, task_id: str) -> dict:
    return dict(cluster.get(f"/notebooks/{task_id}")["notebook"])


def busy_slots(cluster: Cluster) -> int:
    agent = cluster.get("/agents")["agents"][0]
    return sum(1 for s in agent["slots"] if s.get("allocation_id"))


def test_an_idle_notebook_is_reaped_and_a_busy_one_is_not(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(master_yaml="idle_check_interval: 0.5\n")
    cluster.start_agent("agent-1", slots=2)
    idle_cfg = cluster.tmp / "idle.yaml"
    idle_cfg.write_text("idle_timeout: 3s\n")
    busy_cfg = cluster.tmp / "busy.yaml"
    busy_cfg.write_text("idle_timeout: 3s\nnotebook_idle_type: activity\n")

    busy = start_notebook(cluster, "--config-file", str(busy_cfg))
    base = base_url(busy)
    ws = kernel_socket(base, new_kernel(base, cluster.token), cluster.token)
    execute(ws, "import time; time.sleep(40)", wait=False)  # busy far past its timeout
    idle = start_notebook(cluster, "--config-file", str(idle_cfg))
    assert busy_slots(cluster) == 2

    # The one with no kernel open is stopped a few seconds later, and its slot is free.
    ended = wait_for(
        lambda: (n := notebook(cluster, idle["id"]))["state"] == "CANCELED" and n,
        60,
        0.2,
        what="the idle notebook stopped",
    )
    assert ended["allocation"]["state"] == "TERMINATED"
    log = cluster.det("notebook", "logs", idle["id"]).stdout
    assert "idle for" in log and "idle_timeout 3 s" in log
    wait_for(lambda: busy_slots(cluster) == 1, 30, what="the idle notebook's slot freed")

    # The busy one outlives its timeout several times over while its kernel computes.
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 10:
        assert notebook(cluster, busy["id"])["state"] == "ACTIVE"
        time.sleep(0.5)
    ws.close()
    cluster.det("notebook", "kill", busy["id"])


def test_the_clusters_notebook_timeout_is_the_default_idle_timeout(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """master.yaml's `notebook_timeout` (Determined's key, seconds) reaps a notebook whose
    config sets no `idle_timeout`; one that sets its own keeps it."""
    cluster = cluster_factory(master_yaml="idle_check_interval: 0.5\nnotebook_timeout: 3\n")
    cluster.start_agent("agent-1", slots=2)
    own_cfg = cluster.tmp / "own.yaml"
    own_cfg.write_text("idle_timeout: 2h\n")
    own = start_notebook(cluster, "--config-file", str(own_cfg))
    plain = start_notebook(cluster)

    wait_for(
        lambda: notebook(cluster, plain["id"])["state"] == "CANCELED",
        60,
        0.2,
        what="the notebook without idle_timeout stopped by the cluster's default",
    )
    log = cluster.det("notebook", "logs", plain["id"]).stdout
    assert "idle_timeout 3 s" in log, log
    # Started first, idle as long, and past the cluster's 3 s: its own 2 h holds.
    assert notebook(cluster, own["id"])["state"] == "ACTIVE"
    cluster.det("notebook", "kill", own["id"])


@pytest.mark.parametrize("key", ["notebook_timeout", "tensorboard_timeout"])
@pytest.mark.parametrize("bad", ["0", "-5", "true", "'30m'", str(366 * 86400)])
def test_a_bad_idle_timeout_default_is_refused_naming_the_key(tmp_path, key: str, bad: str) -> None:  # type: ignore[no-untyped-def]
    """Determined's two master keys for the cluster's idle timeouts, checked by one rule."""
    from master.config import MasterConfigError, load_master_config

    path = tmp_path / "master.yaml"
    path.write_text(f"{key}: {bad}\n")
    with pytest.raises(MasterConfigError, match=f"{key} must be a number of seconds"):
        load_master_config(path)
    path.write_text(f"{key}: 1800\n")
    assert getattr(load_master_config(path), key) == 1800
    path.write_text(f"{key}: null\n")
    assert getattr(load_master_config(path), key) is None


def test_the_idle_timeout_defaults_are_determineds() -> None:
    """Notebooks: never reaped unless the cluster says; TensorBoards: after 5 idle minutes."""
    from master.config import MasterConfig

    assert MasterConfig().notebook_timeout is None
    assert MasterConfig().tensorboard_timeout == 300
