"""A master killed with -9 mid-training costs running trials nothing: their calls (metrics,
progress, checkpoint registration, searcher) ride out the outage and the trial finishes without
using a restart, with every metric stored exactly once and every checkpoint registered."""

from __future__ import annotations

import signal

import pytest

from tests.cluster import Cluster, wait_for
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import submit

pytestmark = pytest.mark.integration


def _ckpt_dirs(cluster: Cluster) -> set[str]:
    if not cluster.ckpt_dir.exists():
        return set()
    # Checkpoints only: the trials' TensorBoard files live in `tensorboard/` beside them.
    return {p.name for p in cluster.ckpt_dir.iterdir() if p.is_dir() and p.name != "tensorboard"}


def test_master_kill_9_costs_no_restart_and_no_duplicate(cluster: Cluster) -> None:
    config = make_config(
        cluster.ckpt_dir,
        batches=80,
        hparams={"sleep": 0.1, "checkpoint_every": 5},
        # Keep every checkpoint, so the files on disk are exactly the ones registered.
        checkpoint_storage={"save_trial_latest": 100, "save_experiment_best": 100},
    )
    exp_id = submit(cluster, config)
    trial_id = wait_for(
        lambda: (
            (t := cluster.experiment(exp_id)["trials"])
            and t[0]["steps_completed"] >= 10
            and t[0]["id"]
        ),
        120,
        what="training under way",
    )
    registered_before = {
        c["uuid"] for c in cluster.get("/checkpoints", trial_id=trial_id)["checkpoints"]
    }
    cluster.stop_master(signal.SIGKILL)
    # The trial keeps training: a checkpoint it writes now cannot be registered until the
    # master is back (its registration is retried meanwhile, and training waits for it). It may
    # also be the one written just before the kill: the trial flushes its metrics before it
    # registers a checkpoint, so "10 steps reported" often means "checkpoint 10 on disk, its
    # registration next"; waiting for a directory newer than that one waited for good.
    wait_for(
        lambda: _ckpt_dirs(cluster) - registered_before,
        60,
        what="a checkpoint the master has not registered",
    )
    cluster.start_master()

    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    trial = d["trials"][0]
    assert trial["restarts"] == 0, cluster.diagnose(exp_id)
    audit = cluster.get(f"/trials/{trial_id}/metrics", group="training", superseded="true")
    steps = [m["steps_completed"] for m in audit["metrics"]]
    assert steps == list(range(1, 81)), "every step once, none lost, none superseded"
    registered = {c["uuid"] for c in cluster.get("/checkpoints", trial_id=trial_id)["checkpoints"]}
    assert _ckpt_dirs(cluster) <= registered, "every checkpoint written was registered"
