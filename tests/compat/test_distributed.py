"""Multi-worker Determined programs on a real cluster: chief-only checkpoints (shard=False)
with 2 and 4 workers under `determined.launch.torch_distributed`, Determined's error for a
non-chief, sharded checkpoints, and a hand-written launcher using ClusterInfo.container_addrs."""

from __future__ import annotations

import re

import pytest

from tests.compat._util import config, run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("workers", [2, 4])
def test_chief_only_checkpoints_with_several_workers(cluster_factory, workers: int) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=workers)
    text = config(
        cluster,
        {"name": "single"},
        {"max_length": 8, "every": 4},
        entrypoint="python3 -m determined.launch.torch_distributed -- python3 dist_script.py",
        resources={"slots_per_trial": workers},
    )
    d = run(cluster, text, timeout=300)
    exp, (trial,) = d["experiment"], d["trials"]
    assert exp["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    assert trial["restarts"] == 0
    logs = "\n".join(cluster.logs(trial["id"]))
    assert len(re.findall(r"chief checkpoint \S+ at \d+", logs)) == 2
    assert "non-chief store_path refused" in logs and "may only be called on the chief" in logs
    # x sums each worker's rank + 1 per step: the chief reported the allgathered total.
    train = cluster.get(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert train[-1]["metrics"]["x"] == 8 * sum(range(1, workers + 1))
    ckpts = cluster.det_json("checkpoint", "list", str(exp["id"]))
    records = ckpts["checkpoints"] if isinstance(ckpts, dict) else ckpts
    assert len(records) == 3
    sharded = max(records, key=lambda c: (c["steps_completed"], len(c.get("resources") or {})))
    files = set(sharded.get("resources") or {})
    assert {f"rank-{r}.txt" for r in range(workers)} <= files, sharded


def test_hand_written_launcher_uses_container_addrs(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    text = config(
        cluster,
        {"name": "single"},
        {},
        entrypoint="python3 launcher.py",
        resources={"slots_per_trial": 2},
    )
    d = run(cluster, text, timeout=300)
    exp, (trial,) = d["experiment"], d["trials"]
    assert exp["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "container_addrs ['127.0.0.1'] rank 0" in logs
    # wrap_rank prefixes each worker's lines with its rank.
    assert "[rank=0] worker sees ranks [0, 1]" in logs
    assert "[rank=1] worker sees ranks [0, 1]" in logs
    assert trial["best_validation"] == 0.5
