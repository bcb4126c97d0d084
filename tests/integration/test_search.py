"""Hyperparameter search end to end: adaptive ASHA on real processes, and master restarts."""

from __future__ import annotations

import pytest

from tests.cluster import Cluster
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import submit

pytestmark = pytest.mark.integration

ASHA = {
    "name": "adaptive_asha",
    "metric": "loss",
    "smaller_is_better": True,
    "max_length": {"batches": 16},
    "max_trials": 8,
    "max_concurrent_trials": 2,
    "divisor": 2,
    "max_rungs": 3,
    "mode": "aggressive",
}


def asha_config(cluster: Cluster, sleep: float = 0.0) -> str:
    return make_config(
        cluster.ckpt_dir,
        name="asha",
        hparams={"sleep": sleep, "loss_offset": {"type": "double", "minval": 0.0, "maxval": 1.0}},
        searcher=ASHA,
        reproducibility={"experiment_seed": 1234},
        max_restarts=1,
    )


def check_asha_result(cluster: Cluster, exp_id: int) -> None:
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    trials = d["trials"]
    assert len(trials) == 8, [t["request_id"] for t in trials]
    assert len({t["request_id"] for t in trials}) == 8
    assert all(t["state"] == "COMPLETED" for t in trials)
    lengths = sorted(t["searcher_completed"] for t in trials)
    # Aggressive mode, divisor 2, 3 rungs: 4 / 8 / 16 batches.
    assert set(lengths) <= {4, 8, 16}
    assert lengths.count(4) >= 1 and 16 in lengths, lengths
    promoted = [t for t in trials if t["searcher_completed"] > 4]
    assert len(promoted) <= 4  # at most half of the rung's results move up
    # The trial trained furthest is among the better half of its first rung.
    offsets = sorted(t["hparams"]["loss_offset"] for t in trials)
    best = max(trials, key=lambda t: t["searcher_completed"])
    assert best["hparams"]["loss_offset"] <= offsets[len(offsets) // 2]
    assert d["experiment"]["best_trial_id"] is not None
    assert d["experiment"]["progress"] == 1.0


def test_adaptive_asha_completes_with_promotions(cluster: Cluster) -> None:
    exp_id = submit(cluster, asha_config(cluster))
    check_asha_result(cluster, exp_id)
    described = cluster.det("experiment", "describe", str(exp_id)).stdout
    assert "RUNG" in described and "Best validation" in described


def test_master_restart_mid_search_neither_loses_nor_duplicates(cluster: Cluster) -> None:
    exp_id = submit(cluster, asha_config(cluster, sleep=0.05))
    from tests.cluster import wait_for

    wait_for(lambda: len(cluster.experiment(exp_id)["trials"]) >= 3, 120, what="3 trials")
    cluster.stop_master()
    cluster.start_master()
    check_asha_result(cluster, exp_id)


def test_same_seed_gives_the_same_trials(cluster: Cluster) -> None:
    config = asha_config(cluster)
    a = submit(cluster, config)
    b = submit(cluster, config)
    # The k-th trial created gets the k-th draw of the searcher's seeded RNG, whatever the
    # timing of results: compare the full sets once both searches are over.
    ta = cluster.wait_experiment(a, {"COMPLETED"}, timeout=240)["trials"]
    tb = cluster.wait_experiment(b, {"COMPLETED"}, timeout=240)["trials"]
    assert [(t["request_id"], t["hparams"], t["seed"]) for t in ta] == [
        (t["request_id"], t["hparams"], t["seed"]) for t in tb
    ]
