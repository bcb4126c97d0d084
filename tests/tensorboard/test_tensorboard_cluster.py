"""TensorBoard end to end (issue 38): a PyTorchTrial on a real cluster writes its metrics as
TensorBoard events into shared_fs checkpoint storage; `det tensorboard start EXP_ID` runs real
TensorBoard on an agent as its owner, and its scalars, read through the master's proxy
(`/proxy/<task_id>/`) with TensorBoard's own HTTP API, are the trial's metrics."""

from __future__ import annotations

import math
import os
import re
import time
from typing import Any

import pytest
import requests

from harness.core._tensorboard import metric_tag
from tests.cluster import Cluster, wait_for
from tests.integration.test_trial_api import DIGITS, digits_config, metrics, run_to_end
from tests.notebooks._nb import bearer, user_token

pytestmark = pytest.mark.integration


def test_tensorboard_serves_a_pytorch_trials_metrics_through_the_proxy(cluster: Cluster) -> None:
    config = digits_config(
        cluster,
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 100},
        },
        min_validation_period={"batches": 50},
        scheduling_unit=25,
    )
    d, exp_id = run_to_end(cluster, config, DIGITS)
    trial_id = d["trials"][0]["id"]
    reported = metrics(cluster, trial_id)
    stored = cluster.ckpt_dir / "tensorboard" / "experiment" / str(exp_id) / "trial" / str(trial_id)
    assert any(p.name.startswith("events.out.tfevents.") for p in stored.iterdir())

    tb = cluster.det_json("tensorboard", "start", str(exp_id), "--no-browser", "--json")
    base = str(tb["url"])
    assert base.endswith(f"/proxy/{tb['id']}/"), base
    assert tb["experiment_ids"] == [exp_id] and tb["trial_ids"] == [trial_id]
    auth = bearer(cluster.token)
    run = f"experiment/{exp_id}/trial/{trial_id}"

    def scalars(tag: str) -> list[tuple[int, float]]:
        r = requests.get(
            base + "data/plugin/scalars/scalars",
            params={"run": run, "tag": tag},
            headers=auth,
            timeout=10,
        )
        assert r.status_code == 200, r.text
        return [(int(step), float(value)) for _wall, step, value in r.json()]

    wait_for(
        lambda: run in requests.get(base + "data/runs", headers=auth, timeout=10).json(),
        60,
        0.5,
        what="the trial's run in TensorBoard",
    )
    for group in ("training", "validation"):
        for name in reported[group][-1][1]:
            tag = metric_tag(group, name)  # Determined/loss, Determined/val_... (unit-tested)
            want = [(s, float(m[name])) for s, m in reported[group]]
            got = scalars(tag)
            assert [s for s, _ in got] == [s for s, _ in want], tag
            close = [
                math.isclose(a, b, rel_tol=1e-6) for (_, a), (_, b) in zip(got, want, strict=True)
            ]
            assert all(close), (tag, got, want)

    # It ran as its owner's Unix identity, never the agent's (root here).
    logs = cluster.det("tensorboard", "logs", tb["id"]).stdout
    m = re.search(r"TensorBoard files of 1 of 1 experiment\(s\) in \S+ \(uid (\d+)\)", logs)
    assert m and int(m.group(1)) != os.getuid(), logs[-2000:]

    # Only through the proxy, only for its owner (or an admin).
    assert requests.get(base + "data/runs", timeout=10).status_code == 401
    other = user_token(cluster, "mallory")
    assert requests.get(base + "data/runs", headers=bearer(other), timeout=10).status_code == 403
    listed = cluster.det_json("tensorboard", "list")
    assert [t["id"] for t in listed] == [tb["id"]]

    cluster.det("tensorboard", "kill", tb["id"])
    wait_for(
        lambda: cluster.get(f"/tensorboards/{tb['id']}")["tensorboard"]["state"] == "CANCELED",
        60,
        what="the TensorBoard CANCELED",
    )

    # det e delete-tb-files removes what the trial uploaded.
    out = cluster.det("e", "delete-tb-files", str(exp_id)).stdout
    assert out.startswith("Deleted ") and not out.startswith("Deleted 0 ")
    assert not stored.exists()


def test_a_tensorboard_in_use_stays_and_an_idle_one_is_reaped(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(master_yaml="idle_check_interval: 0.5\n")
    cluster.start_agent("agent-1", slots=1)
    config = digits_config(
        cluster,
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 20},
        },
        scheduling_unit=10,
    )
    _, exp_id = run_to_end(cluster, config, DIGITS)
    cfg = cluster.tmp / "tb.yaml"
    cfg.write_text("idle_timeout: 4s\n")
    tb = cluster.det_json("tensorboard", "start", str(exp_id), "--config-file", str(cfg), "--json")
    base, auth = str(tb["url"]), bearer(cluster.token)

    # Requests through the proxy (an open TensorBoard page polls) keep it past its timeout.
    used_since = time.monotonic()
    while time.monotonic() - used_since < 10:
        assert requests.get(base + "data/runs", headers=auth, timeout=10).status_code == 200
        time.sleep(0.5)
    assert cluster.get(f"/tensorboards/{tb['id']}")["tensorboard"]["state"] == "ACTIVE"

    # Left alone, it is stopped.
    wait_for(
        lambda: cluster.get(f"/tensorboards/{tb['id']}")["tensorboard"]["state"] == "CANCELED",
        60,
        0.2,
        what="the idle TensorBoard stopped",
    )
    log = cluster.det("tensorboard", "logs", tb["id"]).stdout
    assert "idle for" in log and "idle_timeout 4 s" in log


def test_the_clusters_tensorboard_timeout_reaps_a_tensorboard_without_its_own(
    cluster_factory: Any,
) -> None:
    """master.yaml's `tensorboard_timeout` (Determined's key, seconds; 300 when absent) is the
    idle timeout of a TensorBoard whose config sets none; one that sets its own keeps it."""
    cluster = cluster_factory(master_yaml="idle_check_interval: 0.5\ntensorboard_timeout: 3\n")
    cluster.start_agent("agent-1", slots=1)
    config = digits_config(
        cluster,
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 10},
        },
        scheduling_unit=10,
    )
    _, exp_id = run_to_end(cluster, config, DIGITS)
    own_cfg = cluster.tmp / "own.yaml"
    own_cfg.write_text("idle_timeout: 2h\n")
    own = cluster.det_json(
        "tensorboard", "start", str(exp_id), "--config-file", str(own_cfg), "--no-browser",
        "--json",
    )  # fmt: skip
    plain = cluster.det_json("tensorboard", "start", str(exp_id), "--no-browser", "--json")

    def state(tb: dict) -> str:
        return str(cluster.get(f"/tensorboards/{tb['id']}")["tensorboard"]["state"])

    wait_for(
        lambda: state(plain) == "CANCELED",
        60,
        0.2,
        what="the TensorBoard without idle_timeout stopped by the cluster's default",
    )
    log = cluster.det("tensorboard", "logs", plain["id"]).stdout
    assert "idle_timeout 3 s" in log, log
    # Started first, idle as long, and past the cluster's 3 s: its own 2 h holds.
    assert state(own) == "ACTIVE"
    cluster.det("tensorboard", "kill", own["id"])
