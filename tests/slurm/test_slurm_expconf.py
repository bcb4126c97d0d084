"""The experiment's (and a command's) `slurm:` section and the Slurm RM's
`rendezvous_network_interface`, on the real test Slurms: sbatch_args and gpu_type reach the job
(`scontrol show job`), an option detlab owns is a 400, slots_per_node splits a trial over nodes
or never fits; the chief's address is the interface's, NCCL/Gloo get its name, and an
interface the node lacks fails the job naming it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.test_foundation import submit
from tests.integration.test_trial_api import DIGITS, digits_config
from tests.slurm._configs import run_command, slurm_master
from tests.slurm.test_slurm_e2e import slurm_job_line

pytestmark = pytest.mark.integration
DONE = {"COMPLETED", "ERROR", "CANCELED"}
VALIDATION = {"name": "single", "metric": "validation_accuracy", "smaller_is_better": False}


def scontrol(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout


def test_sbatch_args_and_gpu_type_reach_the_job(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = digits_config(
        c,
        searcher={**VALIDATION, "max_length": {"batches": 50}},
        min_validation_period={"batches": 50},
        resources={"slots_per_trial": 1, "resource_pool": "low"},
        slurm={"sbatch_args": ["--time=7", "--mem=123M"], "gpu_type": "fake"},
    )
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, DONE, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    job_id = slurm_job_line(c, d["trials"][0]["id"]).split("job ")[1].split()[0]
    shown = scontrol(job_id)
    assert "TimeLimit=00:07:00" in shown, shown
    assert "MinMemoryNode=123M" in shown, shown
    assert "gpu:fake:1" in shown, shown  # the typed GPU request
    assert "Partition=low" in shown and "Requeue=0" in shown, shown  # detlab's own stand


def test_a_gpu_type_the_partition_lacks_never_fits(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    done, lines = run_command(
        c,
        {
            "entrypoint": ["true"],
            "resources": {"slots": 1, "resource_pool": "low"},
            "slurm": {"gpu_type": "v100", "sbatch_args": ["--time=1"]},
        },
        "can never fit: Slurm refused the job",
    )
    assert done["state"] == "ERROR", (done, lines)


def test_an_owned_option_is_refused_with_its_path(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = digits_config(
        c,
        resources={"slots_per_trial": 1, "resource_pool": "low"},
        slurm={"sbatch_args": ["--mem=1G", "--partition=high"]},
    )
    r = c.post("/experiments", {"config": config})
    assert r.status_code == 400, r.text
    assert "slurm.sbatch_args[1]" in r.text and "--partition" in r.text, r.text
    cmd = c.post(
        "/commands", {"config": {"entrypoint": ["true"], "slurm": {"sbatch_args": ["-N2"]}}}
    )
    assert cmd.status_code == 400 and "--nodes" in cmd.text, cmd.text
    assert c.get("/experiments")["experiments"] == []
    # A valid section on this Slurm pool is honoured: no warning says it is ignored.
    ok = digits_config(c, resources={"resource_pool": "low"}, slurm={"sbatch_args": ["-t5"]})
    r = c.post("/experiments?validate_only=true", {"config": ok})
    assert r.status_code == 200 and not any("slurm" in w for w in r.json()["warnings"]), r.text


def test_slots_per_node_beyond_the_partition_never_fits(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory)
    config = digits_config(
        c,
        "distributed.yaml",
        resources={"slots_per_trial": 2, "resource_pool": "low"},
        slurm={"slots_per_node": 1},
        max_restarts=0,
    )
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, DONE, timeout=120)
    assert d["experiment"]["state"] == "ERROR", c.diagnose(exp_id)
    logs = "\n".join(c.logs(d["trials"][0]["id"]))
    assert (
        "can never fit: 2 slots need 2 nodes of 1 slot(s) each (slurm.slots_per_node: 1)" in logs
    ), logs
    assert "submitted to Slurm" not in logs, logs


def test_the_rendezvous_interface_gives_the_chief_address(
    on_two_nodes: Path, cluster_factory
) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory, extra="  rendezvous_network_interface: lo\n")
    config = digits_config(
        c,
        "distributed.yaml",
        # Each node's task prints what its launcher and workers inherit, then trains.
        entrypoint='echo "node $SLURMD_NODENAME: if=$NCCL_SOCKET_IFNAME/$GLOO_SOCKET_IFNAME" '
        "&& exec python3 -m harness.launch model_def:DigitsTrial",
        searcher={**VALIDATION, "max_length": {"batches": 50}},
        min_validation_period={"batches": 50},
        resources={"slots_per_trial": 2, "resource_pool": "low"},
    )
    exp_id = submit(c, config, DIGITS)
    d = c.wait_experiment(exp_id, DONE, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", c.diagnose(exp_id)
    logs = "\n".join(c.logs(d["trials"][0]["id"]))
    for node in ("n1", "n2"):
        assert f"[slurm] node {node}: rendezvous on lo at 127.0.0.1" in logs, logs
        assert f"node {node}: if=lo/lo" in logs, logs  # NCCL's and Gloo's interface
    # The chief posted the interface's address; the other node's workers met at it.
    assert "rendezvous: container 0 of 2 at 127.0.0.1" in logs, logs
    assert "container 1 of 2: ranks 1..1 of 2, store at 127.0.0.1:" in logs, logs


def test_an_interface_the_node_lacks_fails_the_job_naming_it(slurm: Path, cluster_factory) -> None:  # type: ignore[no-untyped-def]
    c = slurm_master(cluster_factory, extra="  rendezvous_network_interface: detlabnope0\n")
    done, lines = run_command(
        c,
        {"entrypoint": ["true"], "resources": {"slots": 1, "resource_pool": "low"}},
        "rendezvous_network_interface 'detlabnope0': no such network interface",
    )
    assert done["state"] == "ERROR" and done["exit_code"] == 1, (done, lines)
