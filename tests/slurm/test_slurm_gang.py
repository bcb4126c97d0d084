"""Multi-node gangs on a real two-node Slurm (nodes n1 and n2 on this host, one fake GPU each):
a 2-slot trial is one job over both nodes, one launcher per node meeting through the master's
rendezvous; a kill ends both nodes' processes; more slots than the nodes have never fits."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.cluster import wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_trial_api import DIGITS, digits_config, metrics, model_dir
from tests.slurm.test_slurm_e2e import slurm_job_line, slurm_master

pytestmark = pytest.mark.integration


def job_state(job_id: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True
    )
    return out.stdout.strip()


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


def test_a_two_slot_trial_trains_over_two_nodes(on_two_nodes: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = digits_config(
        c,
        "distributed.yaml",
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 100},
        },
        min_validation_period={"batches": 100},
        resources={"slots_per_trial": 2, "resource_pool": "low"},
    )
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
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
    config = digits_config(
        c,
        "distributed.yaml",
        entrypoint="slow_def:SlowDigits",
        hparams={"sleep": 0.5},
        resources={"slots_per_trial": 2, "resource_pool": "low"},
    )
    exp_id = submit(c, config, model_dir(c.tmp))
    tid = only_trial(c, exp_id)["id"]
    alloc_id = wait_for(
        lambda: only_trial(c, exp_id).get("allocation_id"), 60, what="the trial's allocation"
    )
    # both nodes' launchers and workers run (each node's worker is one rank's training)
    procs = wait_for(
        lambda: (p := processes_of(alloc_id)) and set(p.values()) == {"n1", "n2"} and p,
        120,
        what="the trial's processes on n1 and n2",
    )
    job_id = slurm_job_line(c, tid).split("job ")[1].split()[0]
    c.det("experiment", "kill", str(exp_id))
    c.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)
    wait_for(lambda: job_state(job_id) == "CANCELLED", 30, what=f"Slurm job {job_id} cancelled")
    wait_for(
        lambda: not processes_of(alloc_id),
        30,
        what=f"the processes {sorted(procs)} of the gang to end on both nodes",
    )


def test_more_slots_than_the_nodes_have_never_fits(on_two_nodes: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = digits_config(c, resources={"slots_per_trial": 3, "resource_pool": "low"})
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, {"ERROR", "COMPLETED", "CANCELED"}, timeout=60)
    assert d["experiment"]["state"] == "ERROR"
    logs = "\n".join(c.logs(d["trials"][0]["id"]))
    # in Slurm's words, as on one node; never a job left pending in Slurm for ever (Slurm
    # itself accepts --nodes=3 on a partition of 2 and holds it: PartitionConfig)
    assert "can never fit" in logs and "Requested node configuration is not available" in logs
    assert "submitted to Slurm" not in logs
