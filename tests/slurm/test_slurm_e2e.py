"""Trials as Slurm jobs on a real single-node Slurm: to COMPLETED with metrics and a
checkpoint, kill reaching the job, Slurm's refusal as "can never fit", pending reasons shown."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.cluster import Cluster, wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_trial_api import DIGITS, metrics, model_dir, run_to_end
from tests.slurm._configs import (
    run_command,
    slurm_master,
    slurm_trial,
    start_slurm,
    stop_slurmctld,
)
from tests.slurm.conftest import SLURM_PORT

pytestmark = pytest.mark.integration


def squeue(job_comment_alloc: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%T|%k"], capture_output=True, text=True, check=True
    ).stdout
    return "\n".join(ln for ln in out.splitlines() if job_comment_alloc in ln)


def job_state(job_id: str) -> str:
    """Slurm job `job_id`'s state (COMPLETED, CANCELLED, ...), ended jobs included."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True
    )
    return out.stdout.strip()


def slurm_job_line(c: Cluster, trial_id: int) -> str:
    for line in c.logs(trial_id):
        if "submitted to Slurm as job" in line:
            return line
    return ""


def test_a_digits_trial_runs_as_a_slurm_job_to_completed(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = slurm_trial(c, batches=200, validate_every=100)
    d, exp_id = run_to_end(c, config, DIGITS)
    trial = d["trials"][0]
    got = metrics(c, trial["id"])
    assert [s for s, _ in got["validation"]] == [100, 200]
    ckpts = c.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert [ck["steps_completed"] for ck in ckpts] == [200]
    assert (c.ckpt_dir / ckpts[0]["uuid"] / "state.pt").exists()
    logs = "\n".join(c.logs(trial["id"]))
    # the job's output file reached the trial's logs, and the job got the fake GPU it asked for
    assert "validation at batch 200" in logs
    assert "submitted to Slurm as job" in logs
    job_id = slurm_job_line(c, trial["id"]).split("job ")[1].split()[0]
    assert job_state(job_id) == "COMPLETED"


def test_kill_reaches_the_job_and_an_impossible_request_never_fits(
    slurm: Path,
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    c = slurm_master(cluster_factory)
    model = model_dir(c.tmp)
    slow = slurm_trial(c, slow=0.5)
    exp_id = submit(c, slow, model)
    wait_for(
        lambda: any(
            "validation" in ln or "batch" in ln for ln in c.logs(only_trial(c, exp_id)["id"])
        ),
        120,
        what="the slow trial to log from its Slurm job",
    )
    trial = only_trial(c, exp_id)
    line = slurm_job_line(c, trial["id"])
    job_id = line.split("job ")[1].split()[0]
    c.det("experiment", "kill", str(exp_id))
    c.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)
    wait_for(lambda: job_state(job_id) == "CANCELLED", 30, what=f"Slurm job {job_id} cancelled")

    # three fake GPUs on a node with two: sbatch refuses, and the trial fails in Slurm's words
    big = slurm_trial(c, slots=3)
    exp_id = submit(c, big, DIGITS)
    d = c.wait_experiment(exp_id, {"ERROR", "COMPLETED", "CANCELED"}, timeout=60)
    assert d["experiment"]["state"] == "ERROR"
    logs = "\n".join(c.logs(d["trials"][0]["id"]))
    assert "can never fit" in logs and "Requested node configuration is not available" in logs


def test_slurms_pending_reason_is_the_queue_reason(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    # two jobs that each want both fake GPUs: the second waits in Slurm for Resources
    # sleep 900: never ends by itself while the test looks (120 s did, on a loaded machine);
    # killed below
    sleeper = slurm_trial(c, entrypoint="sleep 900", slots=2)
    first = submit(c, sleeper, DIGITS)

    def low_pool() -> dict:
        return next(p for p in c.det_json("job", "list") if p["name"] == "low")

    # the partition's capacity is Slurm's: the node's two fake GPUs, both held by the first
    # once Slurm runs it (a trial is ACTIVE while its job still pends, so wait for the job)
    wait_for(
        lambda: (low_pool()["slots_total"], low_pool()["slots_used"]) == (2, 2),
        60,
        what="the first job to run in Slurm and hold both GPUs",
    )
    second = submit(c, sleeper, DIGITS)

    def reason() -> str | None:
        for task in c.get("/tasks")["tasks"]:
            why = task.get("waiting_for") or ""
            if task.get("trial_id") == only_trial(c, second)["id"] and "Slurm" in why:
                return str(why)
        return None

    assert wait_for(reason, 60, what="Slurm's pending reason") in (
        "waiting in Slurm: Resources",
        "waiting in Slurm: Priority",
    )
    # `det job list` shows it on the job's row too
    pools = {p["name"]: p for p in c.det_json("job", "list")}
    jobs = {j["experiment_id"]: j for p in pools.values() for j in p["jobs"]}
    assert jobs[second]["reason"].startswith("waiting in Slurm: "), jobs[second]
    # the second waits, so it holds nothing: both GPUs are still the first's
    assert (pools["low"]["slots_total"], pools["low"]["slots_used"]) == (2, 2), pools["low"]
    for exp_id in (first, second):
        c.det("experiment", "kill", str(exp_id))
    for exp_id in (first, second):
        c.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)


def test_slurm_preemption_checkpoints_and_resumes_without_losing_metrics(
    slurm: Path,
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    c = slurm_master(cluster_factory)
    model = model_dir(c.tmp)
    config = slurm_trial(c, slow=0.1, batches=400, validate_every=100)
    exp_id = submit(c, config, model)
    wait_for(lambda: only_trial(c, exp_id)["steps_completed"] >= 50, 120, what="the trial trains")
    # a job of the higher-priority partition wants both fake GPUs: Slurm preempts the trial
    high = subprocess.run(
        ["sbatch", "--parsable", "--partition=high", "--gres=gpu:2", "--output=/dev/null"]
        + ["--wrap", "sleep 3"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    trial = d["trials"][0]
    logs = "\n".join(c.logs(trial["id"]))
    assert "Slurm wants job" in logs, logs[-3000:]
    got = metrics(c, trial["id"])
    steps = [s for s, _ in got["training"]]
    assert steps == sorted(set(steps)) and steps[-1] == 400  # nothing lost, nothing twice
    assert [s for s, _ in got["validation"]] == [100, 200, 300, 400]
    assert trial["restarts"] == 0
    assert job_state(high) == "COMPLETED"


def test_the_master_keeps_track_of_its_jobs_across_a_slurmctld_restart(
    slurm: Path,
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    c = slurm_master(cluster_factory)
    model = model_dir(c.tmp)
    config = slurm_trial(c, slow=0.05, batches=300, validate_every=100)
    exp_id = submit(c, config, model)
    wait_for(lambda: only_trial(c, exp_id)["steps_completed"] >= 100, 120, what="the trial trains")
    root = stop_slurmctld(slurm)
    # the master sees squeue fail for a while (and concludes nothing), then Slurm is back
    wait_for(lambda: "squeue failed" in c.read_log("master"), 30, what="the master to notice")
    start_slurm(root, SLURM_PORT)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    trial = d["trials"][0]
    assert trial["restarts"] == 0
    assert [s for s, _ in metrics(c, trial["id"])["validation"]] == [100, 200, 300]


def test_a_two_slot_command_is_a_slurm_job_with_both_fake_gpus(
    slurm: Path, cluster_factory
) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    body = {
        "config": {
            "entrypoint": ["sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES slots=$DET_SLOT_IDS"'],
            "resources": {"slots": 2, "resource_pool": "low"},
        }
    }
    done, logs = run_command(c, body["config"], "gpus=0,1 slots=[0, 1]")
    assert (done["state"], done["exit_code"]) == ("COMPLETED", 0), done
    assert "gpus=0,1 slots=[0, 1]" in logs.splitlines(), logs
    assert "submitted to Slurm as job" in logs


def test_a_two_slot_trial_trains_as_one_job_on_both_fake_gpus(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = slurm_trial(c, "distributed.yaml", batches=100, validate_every=100, slots=2)
    d, exp_id = run_to_end(c, config, DIGITS)
    trial = d["trials"][0]
    assert [s for s, _ in metrics(c, trial["id"])["validation"]] == [100]
    logs = "\n".join(c.logs(trial["id"]))
    assert "launching 2 worker(s)" in logs and "(ranks 0..1 of 2)" in logs
    job_id = slurm_job_line(c, trial["id"]).split("job ")[1].split()[0]
    out = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout
    assert "gres/gpu=2" in out or "gres:gpu:2" in out or "gpu:2" in out, out


def test_a_down_partition_keeps_its_trials_queued_with_the_reason(
    slurm: Path, cluster_factory
) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    subprocess.run(["scontrol", "update", "PartitionName=high", "State=DOWN"], check=True)
    try:
        config = slurm_trial(c, batches=50, validate_every=50, pool="high")
        exp_id = submit(c, config, DIGITS)

        def reason() -> str | None:
            trial_id = only_trial(c, exp_id)["id"]
            for task in c.get("/tasks")["tasks"]:
                if task.get("trial_id") == trial_id and task.get("waiting_for"):
                    return str(task["waiting_for"])
            return None

        assert "'high' is not available" in wait_for(reason, 60, what="the queue reason")
        assert not slurm_job_line(c, only_trial(c, exp_id)["id"])  # nothing was submitted
    finally:
        subprocess.run(["scontrol", "update", "PartitionName=high", "State=UP"], check=True)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    assert d["trials"][0]["restarts"] == 0


def test_an_asha_search_runs_its_trials_as_slurm_jobs(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = slurm_trial(
        c,
        "adaptive.yaml",
        searcher={
            "name": "adaptive_asha",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 64},
            "max_trials": 4,
            "max_concurrent_trials": 2,
            "divisor": 4,
            "max_rungs": 2,
            "mode": "standard",
            "sampler": "random",
        },
    )
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    trials = d["trials"]
    assert len(trials) == 4 and all(t["state"] == "COMPLETED" for t in trials)
    assert all(slurm_job_line(c, t["id"]) for t in trials)  # every one ran as a Slurm job
    assert max(t["steps_completed"] for t in trials) == 64


def test_pause_and_activate_resume_from_the_checkpoint(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    model = model_dir(c.tmp)
    config = slurm_trial(c, slow=0.05, batches=300, validate_every=100)
    exp_id = submit(c, config, model)
    tid = only_trial(c, exp_id)["id"]
    c.wait_trial(tid, lambda t: t["steps_completed"] >= 100, timeout=120, what="100 steps")
    c.det("experiment", "pause", str(exp_id))
    paused = c.wait_trial(
        tid, lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None, timeout=60
    )
    assert paused["latest_checkpoint"] and 100 <= paused["steps_completed"] < 300, paused
    c.det("experiment", "activate", str(exp_id))
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    logs = "\n".join(c.logs(tid))
    assert logs.count("submitted to Slurm as job") == 2, logs
    assert re.search(r"resumed from checkpoint \S+ at batch \d+", logs)
    steps = [s for s, _ in metrics(c, tid)["training"]]
    assert steps == sorted(set(steps)) and steps[-1] == 300
