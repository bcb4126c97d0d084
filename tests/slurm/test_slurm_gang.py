"""Multi-node gangs on a real two-node Slurm (nodes n1 and n2 on this host, one fake GPU each):
a 2-slot trial is one job over both nodes, one launcher per node meeting through the master's
rendezvous; a kill ends both nodes' processes; pause/activate and Slurm's own preemption stop
every rank, resume from the chief's checkpoint and lose or repeat no metric; more slots than
the nodes have never fits."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cluster import Cluster, wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_trial_api import DIGITS, metrics, model_dir, run_to_end
from tests.slurm._configs import slurm_master, slurm_trial
from tests.slurm.test_slurm_e2e import job_state, slurm_job_line

pytestmark = pytest.mark.integration


def processes_of(alloc_id: str) -> dict[int, str]:
    """Every process of this host that runs for the allocation (its launchers and workers, on
    either node) -> the Slurm node it runs on."""
    want = f"DET_ALLOCATION_ID={alloc_id}".encode()
    out: dict[int, str] = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        if want in env:
            node = next((e for e in env if e.startswith(b"SLURMD_NODENAME=")), b"=?")
            out[pid] = node.split(b"=", 1)[1].decode()
    return out


def on_both_nodes(alloc_id: str) -> dict[int, str]:
    """Wait until the allocation's processes run on n1 and n2; they, by pid."""
    return wait_for(
        lambda: (p := processes_of(alloc_id)) and set(p.values()) == {"n1", "n2"} and p,
        120,
        what="the trial's processes on n1 and n2",
    )


def gone_from_both_nodes(alloc_id: str, procs: dict[int, str], why: str) -> None:
    """Wait until no process of the allocation runs on either node."""
    wait_for(
        lambda: not processes_of(alloc_id),
        60,
        what=f"the processes {sorted(procs)} of the {why} gang to end on both nodes",
    )


def training_gang(
    c: Cluster, sleep: float, batches: int, trained: int
) -> tuple[int, int, str, dict[int, str]]:
    """A 2-slot slow digits trial over both nodes (validated every 100 batches), once it
    trained `trained` batches with its processes on n1 and n2: its experiment, trial,
    allocation and processes."""
    config = slurm_trial(
        c, "distributed.yaml", slow=sleep, batches=batches, validate_every=100, slots=2
    )
    exp_id = submit(c, config, model_dir(c.tmp))
    tid = only_trial(c, exp_id)["id"]
    c.wait_trial(tid, lambda t: t["steps_completed"] >= trained, timeout=180, what="training")
    alloc_id = only_trial(c, exp_id)["allocation_id"]
    return exp_id, tid, alloc_id, on_both_nodes(alloc_id)


def job_ids(c: Cluster, trial_id: int) -> list[str]:
    """The Slurm jobs the trial was submitted as, in order."""
    return re.findall(r"submitted to Slurm as job (\d+)", "\n".join(c.logs(trial_id)))


def test_a_two_slot_trial_trains_over_two_nodes(on_two_nodes: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = slurm_trial(c, "distributed.yaml", batches=100, validate_every=100, slots=2)
    d, exp_id = run_to_end(c, config, DIGITS)
    trial = d["trials"][0]
    got = metrics(c, trial["id"])
    assert [s for s, _ in got["validation"]] == [100]
    steps = [s for s, _ in got["training"]]
    assert steps == sorted(set(steps)) and steps[-1] == 100, steps  # each once, by rank 0 only
    logs = "\n".join(c.logs(trial["id"]))
    assert "(partition low, 2 nodes of 1 slot(s))" in logs, logs
    # one launcher per node, each one container of the allocation ...
    assert "[slurm] node n1: container 0 of 2" in logs, logs
    assert "[slurm] node n2: container 1 of 2" in logs, logs
    # ... meeting through the master's rendezvous, ranks 0 and 1 of 2
    assert "rendezvous: container 0 of 2" in logs and "rendezvous: container 1 of 2" in logs
    assert "container 0 of 2: ranks 0..0 of 2" in logs, logs
    assert "container 1 of 2: ranks 1..1 of 2" in logs, logs
    job_id = slurm_job_line(c, trial["id"]).split("job ")[1].split()[0]
    assert job_state(job_id) == "COMPLETED"
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"NodeList=n\[1-2\]", shown) and "NumNodes=2" in shown, shown


def test_kill_ends_the_gang_on_both_nodes(on_two_nodes: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = slurm_trial(c, "distributed.yaml", slow=0.5, slots=2)
    exp_id = submit(c, config, model_dir(c.tmp))
    tid = only_trial(c, exp_id)["id"]
    alloc_id = wait_for(
        lambda: only_trial(c, exp_id).get("allocation_id"), 60, what="the trial's allocation"
    )
    # both nodes' launchers and workers run (each node's worker is one rank's training)
    procs = on_both_nodes(alloc_id)
    job_id = slurm_job_line(c, tid).split("job ")[1].split()[0]
    c.det("experiment", "kill", str(exp_id))
    c.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)
    wait_for(lambda: job_state(job_id) == "CANCELLED", 30, what=f"Slurm job {job_id} cancelled")
    gone_from_both_nodes(alloc_id, procs, "killed")


def test_more_slots_than_the_nodes_have_never_fits(on_two_nodes: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = slurm_trial(c, slots=3)
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, {"ERROR", "COMPLETED", "CANCELED"}, timeout=60)
    assert d["experiment"]["state"] == "ERROR"
    logs = "\n".join(c.logs(d["trials"][0]["id"]))
    # in Slurm's words, as on one node; never a job left pending in Slurm for ever (Slurm
    # itself accepts --nodes=3 on a partition of 2 and holds it: PartitionConfig)
    assert "can never fit" in logs and "Requested node configuration is not available" in logs
    assert "submitted to Slurm" not in logs


def test_pause_and_activate_of_a_gang_resume_from_the_chiefs_checkpoint(
    on_two_nodes: Path, cluster_factory: Callable[..., Cluster]
) -> None:
    c = slurm_master(cluster_factory)
    exp_id, tid, alloc_id, procs = training_gang(c, 0.05, batches=300, trained=100)
    c.det("experiment", "pause", str(exp_id))
    paused = c.wait_trial(
        tid, lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None, timeout=90
    )
    assert paused["latest_checkpoint"] and 100 <= paused["steps_completed"] < 300, paused
    # every rank stopped on both nodes, and the job ended by itself (the trial exited), not
    # by a scancel
    gone_from_both_nodes(alloc_id, procs, "paused")
    first = job_ids(c, tid)
    assert len(first) == 1 and job_state(first[0]) == "COMPLETED", first
    ckpt = c.get(f"/checkpoints/{paused['latest_checkpoint']}")["checkpoint"]
    assert ckpt["steps_completed"] == paused["steps_completed"], ckpt

    c.det("experiment", "activate", str(exp_id))
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    assert d["trials"][0]["restarts"] == 0
    logs = "\n".join(c.logs(tid))
    jobs = job_ids(c, tid)
    assert len(jobs) == 2 and logs.count("(partition low, 2 nodes of 1 slot(s))") == 2, logs
    # both ranks of the second job resumed from the chief's checkpoint, at the paused batch
    resumed = re.findall(r"resumed from checkpoint (\S+) at batch (\d+)", logs)
    at = (paused["latest_checkpoint"], str(paused["steps_completed"]))
    assert resumed == [at, at], resumed
    got = metrics(c, tid)
    assert [s for s, _ in got["training"]] == list(range(50, 301, 50))  # each once, none lost
    assert [s for s, _ in got["validation"]] == [100, 200, 300]


def test_slurm_preemption_of_a_gang_checkpoints_and_resumes(
    on_two_nodes: Path, cluster_factory: Callable[..., Cluster]
) -> None:
    c = slurm_master(cluster_factory)
    exp_id, tid, alloc_id, procs = training_gang(c, 0.1, batches=400, trained=50)
    # a job of the higher-priority partition wants both nodes: Slurm preempts the gang
    high = subprocess.run(
        ["sbatch", "--parsable", "--partition=high", "--nodes=2", "--gres=gpu:1"]
        + ["--output=/dev/null", "--wrap", "sleep 3"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    gone_from_both_nodes(alloc_id, procs, "preempted")
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    trial = d["trials"][0]
    assert trial["restarts"] == 0
    logs = "\n".join(c.logs(tid))
    # USR1 reached the launcher on each node (srun passes the batch script's on)
    assert "[slurm] node n1: Slurm's notice (USR1)" in logs, logs[-4000:]
    assert "[slurm] node n2: Slurm's notice (USR1)" in logs, logs[-4000:]
    assert "Slurm wants job" in logs, logs[-4000:]
    jobs = job_ids(c, tid)
    assert len(jobs) == 2 and job_state(jobs[0]) == "COMPLETED", jobs  # it exited by itself
    # the chief checkpointed when asked (the gang's first checkpoint: none is due before the
    # end), and both ranks of the second job resumed from it
    saved = re.findall(r"harness.pytorch: checkpoint (\S+) at batch (\d+)", logs)
    resumed = re.findall(r"resumed from checkpoint (\S+) at batch (\d+)", logs)
    assert resumed == [saved[0], saved[0]], (saved, resumed)
    got = metrics(c, tid)
    assert [s for s, _ in got["training"]] == list(range(50, 401, 50))  # each once, none lost
    assert [s for s, _ in got["validation"]] == [100, 200, 300, 400]
    assert job_state(high) == "COMPLETED"
