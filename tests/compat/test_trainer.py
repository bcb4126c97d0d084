"""Determined 0.38's PyTorch Trainer API on a real cluster: Epoch/Batch lengths and periods, a
MetricReducer and a PyTorchCallback, pause and resume from the checkpoint."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from tests.cluster import Cluster
from tests.compat._util import SCRIPTS, config, run
from tests.integration.test_foundation import submit

pytestmark = pytest.mark.integration


def trainer_config(cluster: Cluster, **hp: object) -> str:
    hparams = {
        "lr": 0.05,
        "max_length": ["epochs", 2],
        "validation_period": ["epochs", 1],
        "checkpoint_period": ["batches", 4],
        **hp,
    }
    return config(
        cluster,
        {"name": "single", "metric": "validation_loss"},
        hparams,
        entrypoint="python3 trainer_script.py",
        reproducibility={"experiment_seed": 5},
    )


def test_trainer_fit_with_epoch_and_batch_lengths(cluster: Cluster) -> None:
    d = run(cluster, trainer_config(cluster), timeout=300)
    exp, (trial,) = d["experiment"], d["trials"]
    assert exp["state"] == "COMPLETED", cluster.diagnose(exp["id"])
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert trial["steps_completed"] == 16  # Epoch(2) of 64 records in batches of 8
    vals = cluster.get(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert [v["steps_completed"] for v in vals] == [8, 16]  # validation_period=Epoch(1)
    assert all("max_abs_error" in v["metrics"] for v in vals)  # the MetricReducer
    best = min(v["metrics"]["validation_loss"] for v in vals)
    assert trial["best_validation"] == pytest.approx(best)
    assert exp["best_trial_id"] == trial["id"]
    ckpts = cluster.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert sorted(c["steps_completed"] for c in ckpts) == [4, 8, 12, 16]  # Batch(4)
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "callback: validation 2 ended" in logs
    # The Trainer wrote its metrics as TensorBoard events into checkpoint storage.
    tb_dir = cluster.ckpt_dir / f"tensorboard/experiment/{exp['id']}/trial/{trial['id']}"
    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    events = acc.Tensors("Determined/validation_loss")
    assert [e.step for e in events] == [8, 16]
    got = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in events]
    assert got == pytest.approx([v["metrics"]["validation_loss"] for v in vals], rel=1e-6)


def test_trainer_pause_and_resume_from_checkpoint(cluster: Cluster) -> None:
    text = trainer_config(
        cluster,
        sleep=0.15,
        max_length=["batches", 40],
        validation_period=["batches", 20],
        checkpoint_period=["batches", 5],
    )
    exp_id = submit(cluster, text, SCRIPTS)
    trial_id = _first_trial(cluster, exp_id)
    cluster.wait_trial(trial_id, lambda t: t["latest_checkpoint"] is not None, 180, "checkpoint")
    cluster.det("experiment", "pause", str(exp_id))
    cluster.wait_experiment(exp_id, {"PAUSED"})
    cluster.wait_trial(
        trial_id, lambda t: t["display_state"] == "PAUSED" and not t["allocation_id"]
    )
    paused_at = cluster.get(f"/trials/{trial_id}")["trial"]["steps_completed"]
    assert 0 < paused_at < 40
    cluster.det("experiment", "activate", str(exp_id))
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (trial,) = d["trials"]
    assert trial["steps_completed"] == 40 and trial["restarts"] == 0
    logs = "\n".join(cluster.logs(trial_id))
    assert "resumed from checkpoint" in logs
    # Training resumed where the checkpoint was: no batch was reported twice.
    steps = [
        m["steps_completed"]
        for m in cluster.get(f"/trials/{trial_id}/metrics")["metrics"]
        if m["group"] == "validation"
    ]
    assert steps == [20, 40]


def _first_trial(cluster: Cluster, exp_id: int) -> int:
    from tests.cluster import wait_for

    return wait_for(lambda: cluster.experiment(exp_id)["trials"], 60, what="a trial")[0]["id"]
