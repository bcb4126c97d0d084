"""A Slurm trial counts as RUNNING once its harness reported to the master, not when Slurm
starts the batch script; meanwhile its queue reason says it waits for the harness."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.cluster import wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_trial_api import DIGITS
from tests.slurm._configs import slurm_master, slurm_trial

pytestmark = pytest.mark.integration


def test_a_trial_is_running_only_once_its_harness_reported(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    started, go = c.tmp / "job-started", c.tmp / "harness-may-start"
    # The job runs in Slurm at once, but its harness starts only when the test says so.
    gate = (
        f"touch {shlex.quote(str(started))}; "
        f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.1; done; "
        "exec python3 -m harness.launch model_def:DigitsTrial"
    )
    config = slurm_trial(c, entrypoint=gate, batches=100, validate_every=100)
    exp_id = submit(c, config, DIGITS)

    def task() -> dict:
        trial_id = only_trial(c, exp_id)["id"]
        return next(t for t in c.get("/tasks")["tasks"] if t.get("trial_id") == trial_id)

    wait_for(started.exists, 90, what="Slurm to run the job's batch script")
    reason = wait_for(
        lambda: (
            task().get("waiting_for") if "harness" in (task().get("waiting_for") or "") else None
        ),
        30,
        what="the queue reason to say the job waits for its harness",
    )
    assert reason.startswith("started in Slurm as job "), reason
    t = task()
    assert t["allocation"]["state"] == "ASSIGNED", t
    # the job holds its slot in Slurm already
    low = next(p for p in c.det_json("job", "list") if p["name"] == "low")
    assert low["slots_used"] == 1, low

    go.touch()
    wait_for(
        lambda: task()["allocation"]["state"] == "RUNNING" or None,
        90,
        what="the allocation to be RUNNING once the harness polled the master",
    )
    assert task().get("waiting_for") is None
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    logs = "\n".join(c.logs(only_trial(c, exp_id)["id"]))
    assert "waiting for the harness to report" in logs
