"""A PostgreSQL outage under a running trial (the master's database connections dropped and
refused for a few seconds, through a TCP proxy): clients get 503s, never a 500, and the trial
finishes without a restart and without a duplicate or missing metric."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from bench._tcpproxy import TcpProxy
from tests.cluster import (
    Cluster,
    cluster_dir,
    create_pg_database,
    drop_pg_database,
    release_cluster_dir,
    wait_for,
)
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import only_trial, submit

pytestmark = pytest.mark.integration


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Cluster, TcpProxy]]:
    url = create_pg_database()
    proxy = TcpProxy(("127.0.0.1", 5432)).start()
    host = url.split("@", 1)[1].split("/", 1)[0]
    # A directory its trial, running as another Unix user, can reach (tests/cluster.py).
    where = cluster_dir(tmp_path, "cluster")
    cluster = Cluster(where, url.replace(host, f"127.0.0.1:{proxy.port}"))
    try:
        cluster.start_master()
        cluster.start_agent("agent-1", slots=1)
        yield cluster, proxy
    finally:
        cluster.stop()
        proxy.stop()
        drop_pg_database(url)
        release_cluster_dir(tmp_path, "cluster")


def test_a_database_outage_costs_no_500_and_no_restart(
    proxied: tuple[Cluster, TcpProxy],
) -> None:
    cluster, proxy = proxied
    config = make_config(
        cluster.ckpt_dir, batches=120, hparams={"sleep": 0.05, "checkpoint_every": 10}
    )
    exp_id = submit(cluster, config)
    tid = only_trial(cluster, exp_id)["id"]
    cluster.wait_trial(tid, lambda t: t["steps_completed"] >= 20, what="20 steps")

    answers: list[int] = []
    stop = threading.Event()
    token = cluster.token

    def client() -> None:
        s = requests.Session()
        while not stop.is_set():
            r = s.get(
                f"{cluster.url}/api/v1/experiments/{exp_id}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            answers.append(r.status_code)
            stop.wait(0.05)

    poller = threading.Thread(target=client, daemon=True)
    poller.start()
    proxy.outage()
    wait_for(lambda: 503 in answers, 30, what="the master noticing the outage")
    wait_for(lambda: answers.count(503) >= 20, 30, what="an outage of some length")
    proxy.restore()
    wait_for(lambda: answers[-1] == 200, 60, what="the master serving again")
    stop.set()
    poller.join()
    assert 500 not in answers and set(answers) <= {200, 503}

    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert d["trials"][0]["restarts"] == 0, cluster.diagnose(exp_id)
    metrics = cluster.get(f"/trials/{tid}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in metrics] == list(range(1, 121))
    assert "unhandled error" not in cluster.read_log("master")
