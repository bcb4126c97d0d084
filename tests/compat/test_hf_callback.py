"""`determined.transformers.DetCallback` on a real cluster: a Hugging Face Trainer (a tiny GPT-2
built in the script, random tokens) reports metrics and checkpoints, follows the legacy
`searcher.max_length`, pauses and resumes from its checkpoint, and `det e continue` trains the
same trial on."""

from __future__ import annotations

import re

import pytest

from tests.cluster import Cluster
from tests.compat._util import SCRIPTS, TERMINAL, config
from tests.integration.test_foundation import submit

pytestmark = pytest.mark.integration


def _steps(cluster: Cluster, trial_id: int, group: str) -> list[int]:
    rows = cluster.get(f"/trials/{trial_id}/metrics", group=group)["metrics"]
    return [m["steps_completed"] for m in rows]


@pytest.mark.timeout(900)  # three runs of a process that imports transformers and torch
def test_trainer_reports_pauses_resumes_and_continues(cluster: Cluster) -> None:
    # max_steps 1000 in the script: the legacy searcher.max_length (12 batches) decides.
    text = config(
        cluster,
        {"name": "single", "metric": "eval_loss", "max_length": {"batches": 12}},
        {"max_steps": 1000, "every": 4, "sleep": 0.3},
        entrypoint="python3 hf_script.py",
        max_restarts=0,
    )
    exp_id = submit(cluster, text, SCRIPTS)
    trial_id = cluster.experiment(exp_id)["trials"][0]["id"]
    first = cluster.wait_trial(
        trial_id,
        lambda t: t["latest_checkpoint"] is not None or t["state"] in TERMINAL,
        timeout=400,
    )
    assert first["state"] not in TERMINAL, "\n".join(cluster.logs(trial_id))[-4000:]
    cluster.det("experiment", "pause", str(exp_id))
    cluster.wait_trial(
        trial_id, lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None, timeout=120
    )
    paused_at = cluster.get(f"/trials/{trial_id}")["trial"]["latest_checkpoint"]
    cluster.det("experiment", "activate", str(exp_id))
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (trial,) = d["trials"]
    logs = "\n".join(cluster.logs(trial_id))
    assert "resume_from_checkpoint=None" in logs  # the first run
    m = re.search(r"resume_from_checkpoint=\S*checkpoint-(\d+)", logs)
    assert m, logs[-3000:]
    assert f"resuming from checkpoint {paused_at}" in logs
    assert "done at 12" in logs and trial["steps_completed"] == 12
    # In order across the pause (what the interrupted run reported past its checkpoint is
    # superseded; the closing summary adds a second report at the last step).
    train = _steps(cluster, trial_id, "training")
    assert train == sorted(train) and train[-1] == 12 and {4, 8} <= set(train)
    assert _steps(cluster, trial_id, "validation")[-1] == 12
    val = cluster.get(f"/trials/{trial_id}/metrics", group="validation")["metrics"][-1]
    assert "eval_loss" in val["metrics"]
    assert trial["searcher_completed"] == 12  # the searcher's operation was completed
    ckpts = cluster.get(f"/trials/{trial_id}/checkpoints")["checkpoints"]
    assert {c["steps_completed"] for c in ckpts} >= {int(m.group(1)), 12}
    last = next(c for c in ckpts if c["uuid"] == trial["latest_checkpoint"])
    assert last["metadata"]["trial_id"] == trial_id
    assert last["metadata"]["source"] == "hf_script"
    assert "trainer_state.json" in last["resources"]

    # Determined's `det e continue`: the same trial trains on to the new searcher length.
    # -f follows it to its end (exit 0: COMPLETED), as Determined's --follow-first-trial.
    followed = cluster.det(
        "experiment", "continue", str(exp_id), "--config", "searcher.max_length=16", "-f"
    )
    assert f"Continued experiment {exp_id}" in followed.stdout and "done at 16" in followed.stdout
    d2 = cluster.wait_experiment(exp_id, TERMINAL, timeout=300)
    assert d2["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (again,) = d2["trials"]
    assert again["id"] == trial_id and again["steps_completed"] == 16
    assert "done at 16" in "\n".join(cluster.logs(trial_id))
    assert _steps(cluster, trial_id, "training")[-1] == 16
