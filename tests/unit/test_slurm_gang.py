"""Multi-node gangs on Slurm, the pure parts: how many nodes, sbatch's and srun's arguments,
each node's size from sinfo, and each node's container rank in the launcher."""

from __future__ import annotations

import dataclasses

import pytest

from agent.slurm_job import container_rank, local_spec
from detlab.protocol import StartSpec
from master.rm import slurm_cli as cli
from master.rm.slurm_config import SlurmConfig
from master.rm.slurm_gang import (
    Gang,
    container_key,
    gang_sbatch_args,
    never_fits,
    plan_gang,
    srun_prefix,
)


@pytest.mark.parametrize(
    ("slots", "node_slots", "want"),
    [
        (2, 2, Gang(1, 2)),  # fits on one node: one node, as always
        (1, 8, Gang(1, 1)),
        (0, 2, Gang(1, 0)),
        (2, 1, Gang(2, 1)),
        (8, 4, Gang(2, 4)),
        (6, 4, Gang(2, 3)),  # the fewest nodes over which the slots split evenly
        (5, 4, Gang(5, 1)),
        (9, 4, Gang(3, 3)),
        (4, 0, Gang(1, 4)),  # a node's size unknown (no GPUs listed): Slurm judges
    ],
)
def test_plan_gang(slots: int, node_slots: int, want: Gang) -> None:
    assert plan_gang(slots, node_slots) == want


def test_a_gang_larger_than_the_partition_never_fits() -> None:
    assert never_fits(Gang(2, 1), 2, "low", 2) is None
    assert never_fits(Gang(1, 4), 4, "low", 1) is None
    assert never_fits(Gang(3, 1), 3, "low", 2) == (
        "3 slots need 3 nodes of 1 slot(s) each, and Slurm partition low has 2 node(s)"
    )


def test_sbatch_of_a_gang_asks_for_one_task_per_node_and_the_slots_of_each() -> None:
    sub = cli.Submission("7.a", "a-1", "gpu", 4, "/jobs/a-1", gang=Gang(2, 2))
    argv = cli.sbatch_argv(SlurmConfig("/jobs"), sub)
    for arg in ("--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--gres=gpu:2"):
        assert arg in argv
    assert "--nodes=1" not in argv and "--gres=gpu:4" not in argv
    tres = cli.sbatch_argv(SlurmConfig("/jobs", gres_supported=False), sub)
    assert "--gpus-per-node=2" in tres and not any(a.startswith("--gpus=") for a in tres)
    assert gang_sbatch_args(Gang(3, 8), "cpu", True)[-1] == "--cpus-per-task=8"
    # a one-node "gang" is the ordinary submission
    one = cli.sbatch_argv(SlurmConfig("/jobs"), dataclasses.replace(sub, gang=Gang(1, 4)))
    assert "--nodes=1" in one and "--gres=gpu:4" in one


def test_the_batch_script_starts_one_launcher_per_node_through_srun() -> None:
    assert srun_prefix(1) == []
    script = cli.job_script("/venv/bin/python", "/code", "/jobs/a-1", None, nodes=2)
    line = next(ln for ln in script.splitlines() if "agent.slurm_job" in ln)
    assert line.startswith(
        "srun --export=ALL --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 "
        "/venv/bin/python -m agent.slurm_job"
    ), line
    single = cli.job_script("/venv/bin/python", "/code", "/jobs/a-1", None)
    assert "\nsrun " not in single and "agent.slurm_job" in single


def test_sinfo_gives_the_largest_nodes_slots() -> None:
    rows = cli.parse_sinfo("big|up|2|64|gpu:4|idle\nbig|up|1|32|gpu:8|mix\nlow|up|2|1|gpu:1|idle\n")
    assert cli.node_slots(rows["big"], "cuda") == 8 and cli.node_slots(rows["big"], "cpu") == 64
    assert cli.node_slots(rows["low"], "cuda") == 1 and rows["low"].nodes == 2


def test_each_node_is_one_container_of_the_allocation() -> None:
    assert container_key("slurm:default", 0) == "slurm:default"
    assert container_key("slurm:default", 1) == "slurm:default#1"
    spec = StartSpec("a", 1, 1, "x", (), {"DET_NUM_CONTAINERS": "2", "DET_CONTAINER_RANK": "0"})
    assert container_rank(spec, {"SLURM_PROCID": "1"}) == 1
    assert container_rank(spec, {}) == 0  # the batch script itself (one node)
    for bad in ("2", "-1", "x"):
        with pytest.raises(ValueError, match="not one of the allocation's 2 container"):
            container_rank(spec, {"SLURM_PROCID": bad})
    local, _ = local_spec(spec, [0], 1)
    assert local.env["DET_CONTAINER_RANK"] == "1" and local.env["DET_SLOT_IDS"] == "[0]"
