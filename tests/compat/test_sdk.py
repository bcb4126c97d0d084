"""Determined's Python SDK shape (`harness.experimental.client`) against a real cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster import ADMIN_PASSWORD, Cluster
from tests.compat._util import SCRIPTS

pytestmark = pytest.mark.integration


def test_sdk_creates_waits_reads_metrics_and_downloads_checkpoints(
    cluster: Cluster, tmp_path: Path
) -> None:
    from harness.experimental import client

    client.login(master=cluster.url, user="admin", password=ADMIN_PASSWORD)
    config = {
        "name": "sdk",
        "entrypoint": "python3 core_script.py",
        "hyperparameters": {"max_length": 6, "every": 3, "lr": 1.0},
        "searcher": {"name": "single", "metric": "loss"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(cluster.ckpt_dir)},
    }
    exp = client.create_experiment(config=config, model_dir=str(SCRIPTS))
    assert exp.wait(interval=0.2) == client.ExperimentState.COMPLETED
    (trial,) = exp.list_trials()
    assert trial.state == client.ExperimentState.COMPLETED
    assert trial.hparams["max_length"] == 6
    vals = list(trial.iter_metrics("validation"))
    assert [(m.steps_completed, m.metrics["loss"]) for m in vals] == [(6, pytest.approx(1 / 7))]
    assert [m.steps_completed for m in trial.iter_metrics("training")] == [3, 6]
    top = exp.top_checkpoint()
    assert top.trial_id == trial.id and top.steps_completed == 6
    path = top.download(str(tmp_path / "ckpt"))
    assert json.loads((Path(path) / "state.json").read_text())["steps"] == 6
    again = client.get_checkpoint(top.uuid)
    assert again.metadata["steps_completed"] == 6
    assert [e.id for e in client.list_experiments(name="sdk")] == [exp.id]
    assert client.get_trial(trial.id).experiment_id == exp.id
    assert any("done at 6" in line for line in trial.logs())
