"""The tasks listing's idle time (issue 38; det-tui's IDLE column): a running shell without an
idle timeout is measured all the same (never reaped), idle while no session is open and in use
while one is; commands carry none."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.cluster import BIN, wait_for

pytestmark = pytest.mark.integration


def test_a_shells_idle_time_is_listed(cluster_factory: Any) -> None:
    cluster = cluster_factory(master_yaml="idle_check_interval: 0.5\n")
    cluster.start_agent("agent-1", slots=2)

    def idle_since(task_id: str) -> str | None:
        return cluster.get(f"/tasks/{task_id}")["task"]["idle_since"]

    shell = cluster.det_json("shell", "start", "-d")
    since = wait_for(lambda: idle_since(shell["id"]), 120, what="the shell judged idle")
    # A session through the proxy: in use (null) while it is open.
    session = subprocess.Popen(
        [str(BIN / "det"), "shell", "open", shell["id"], "--", "sleep", "600"],
        env=cluster.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: idle_since(shell["id"]) is None, 120, what="the shell in use")
    finally:
        session.kill()
        session.wait()
    # Closed again: idle anew, from a later time than before, never reaped (no idle_timeout).
    later = wait_for(lambda: idle_since(shell["id"]), 120, what="idle again")
    assert later > since
    assert cluster.get(f"/tasks/{shell['id']}")["task"]["state"] == "ACTIVE"
    listed = {t["id"]: t for t in cluster.get("/tasks")["tasks"]}
    assert listed[shell["id"]]["idle_since"] == later
    cluster.det("shell", "kill", shell["id"])
    wait_for(lambda: cluster.get(f"/tasks/{shell['id']}")["task"]["state"] == "CANCELED", 60)
    assert idle_since(shell["id"]) is None  # ended: no idle time
