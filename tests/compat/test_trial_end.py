"""Determined 0.38's trial-ending rules on a real cluster: a trial whose process exits 0 is
COMPLETED, with or without searcher operations, and the searcher metric comes from the reported
validation metrics. The scripts are written for Determined (`import determined as det`)."""

from __future__ import annotations

import pytest

from tests.cluster import Cluster
from tests.compat._util import config, run

pytestmark = pytest.mark.integration


def test_clean_exit_without_searcher_operations_is_completed(cluster: Cluster) -> None:
    # No max_length (optional for single in 0.38): the script decides how long it trains.
    text = config(cluster, {"name": "single"}, {"max_length": 12, "every": 4, "lr": 0.5})
    d = run(cluster, text)
    exp, (trial,) = d["experiment"], d["trials"]
    assert exp["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert trial["steps_completed"] == 12
    # The searcher metric is the reported validation's: best trial and best validation are set.
    assert trial["best_validation"] == pytest.approx(1 / (1 + 0.5 * 12))
    assert exp["best_validation"] == pytest.approx(1 / (1 + 0.5 * 12))
    assert exp["best_trial_id"] == trial["id"]
    assert exp["progress"] == 1.0
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "harness/_alias/determined/__init__.py" in logs  # the runtime's alias was imported
    assert "done at 12" in logs
    described = cluster.det_json("experiment", "describe", str(exp["id"]))
    assert described["experiment"]["best_validation"] == pytest.approx(1 / 7)


def test_clean_exit_with_searcher_operations_is_completed(cluster: Cluster) -> None:
    text = config(
        cluster,
        {"name": "single", "max_length": {"batches": 10}},
        {"use_ops": True, "every": 5, "lr": 1.0},
    )
    d = run(cluster, text)
    (trial,) = d["trials"]
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(d["experiment"]["id"])
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert trial["searcher_completed"] == 10
    assert trial["best_validation"] == pytest.approx(1 / 11)


def test_searcher_operations_without_max_length_get_a_default_length(cluster: Cluster) -> None:
    text = config(cluster, {"name": "single"}, {"use_ops": True, "every": 50})
    d = run(cluster, text)
    (trial,) = d["trials"]
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(d["experiment"]["id"])
    assert trial["steps_completed"] == 100 and trial["restarts"] == 0


def test_grid_search_best_trial_comes_from_validations(cluster: Cluster) -> None:
    hp = {"max_length": 6, "every": 3, "lr": {"type": "categorical", "vals": [0.1, 1.0, 3.0]}}
    text = config(
        cluster,
        {"name": "grid", "max_concurrent_trials": 1},
        hp,
    )
    d = run(cluster, text, timeout=300)
    exp, trials = d["experiment"], d["trials"]
    assert exp["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    assert [t["state"] for t in trials] == ["COMPLETED"] * 3
    assert all(t["restarts"] == 0 for t in trials)
    best = min(trials, key=lambda t: t["best_validation"])
    assert best["hparams"]["lr"] == 3.0
    assert exp["best_trial_id"] == best["id"]
    assert exp["best_validation"] == pytest.approx(1 / (1 + 3.0 * 6))


def test_asha_gets_rung_results_from_validations_of_scripts_without_operations(
    cluster: Cluster,
) -> None:
    hp = {"max_length": 8, "every": 4, "lr": {"type": "double", "minval": 0.1, "maxval": 2.0}}
    text = config(
        cluster,
        {
            "name": "adaptive_asha",
            "max_length": {"batches": 8},
            "max_trials": 4,
            "mode": "aggressive",
            "max_concurrent_trials": 2,
        },
        hp,
        reproducibility={"experiment_seed": 7},
    )
    d = run(cluster, text, timeout=400)
    exp, trials = d["experiment"], d["trials"]
    assert exp["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    assert len(trials) == 4 and {t["state"] for t in trials} == {"COMPLETED"}
    assert all(t["restarts"] == 0 for t in trials)
    best = min(trials, key=lambda t: t["best_validation"])
    assert exp["best_trial_id"] == best["id"]


def test_max_time_form_trials_complete(cluster: Cluster) -> None:
    hp = {"max_length": 10, "every": 5, "lr": {"type": "double", "minval": 0.1, "maxval": 2.0}}
    text = config(
        cluster,
        {
            "name": "adaptive_asha",
            "time_metric": "batches",
            "max_time": 10,
            "max_trials": 3,
            "max_concurrent_trials": 1,
        },
        hp,
        reproducibility={"experiment_seed": 3},
    )
    d = run(cluster, text, timeout=400)
    exp, trials = d["experiment"], d["trials"]
    assert exp["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    assert len(trials) == 3 and {t["state"] for t in trials} == {"COMPLETED"}
    assert all(t["restarts"] == 0 for t in trials)
