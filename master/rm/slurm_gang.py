"""How many Slurm nodes a trial spans, and what sbatch and the batch script say for it (pure).

A trial whose slots fit on one node of its partition is one task on one node, as always. One
that needs more is a gang: `--nodes=N --ntasks=N --ntasks-per-node=1` with the same slots on
every node, and the batch script starts one launcher per node through `srun`. Each launcher is
one container of the allocation (its rank is Slurm's SLURM_PROCID): the launchers meet through
the master's rendezvous (`POST /allocations/<id>/rendezvous`), as a Kubernetes gang's pods do,
and the harness gives each node's workers their global ranks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gang:
    nodes: int
    slots_per_node: int


def plan_gang(slots: int, node_slots: int, slots_per_node: int | None = None) -> Gang:
    """One node when the slots fit on one (or a node's size is unknown: Slurm then judges the
    request); else the fewest nodes over which the slots split evenly, so that every node runs
    the same number of workers (6 slots on 4-GPU nodes: 2 nodes of 3). The experiment's
    `slurm.slots_per_node` caps a node's share below what the node has (2 slots, at most 1 a
    node: 2 nodes of 1, even on 2-GPU nodes)."""
    per_node = node_slots
    if slots_per_node is not None:
        per_node = min(node_slots, slots_per_node) if node_slots > 0 else slots_per_node
    if slots <= per_node or per_node <= 0:
        return Gang(1, slots)
    nodes = -(-slots // per_node)
    while slots % nodes:
        nodes += 1
    return Gang(nodes, slots // nodes)


def never_fits(
    gang: Gang,
    slots: int,
    partition: str,
    partition_nodes: int,
    slots_per_node: int | None = None,
) -> str | None:
    """Why the gang can never run on this partition, or None. Slurm itself accepts more
    nodes than a partition has and leaves the job pending (PartitionConfig) forever."""
    if gang.nodes <= 1 or gang.nodes <= partition_nodes:
        return None
    cap = f" (slurm.slots_per_node: {slots_per_node})" if slots_per_node is not None else ""
    return (
        f"{slots} slots need {gang.nodes} nodes of {gang.slots_per_node} slot(s) each{cap}, "
        f"and Slurm partition {partition} has {partition_nodes} node(s)"
    )


def one_node_never_fits(kind: str, slots: int, slots_per_node: int | None) -> str | None:
    """Why a command, notebook or shell (one node: only trials span nodes) can never run
    under its own `slurm.slots_per_node`, or None."""
    if slots_per_node is None or slots <= slots_per_node:
        return None
    return (
        f"slurm.slots_per_node is {slots_per_node} but the {kind} needs {slots} slots on its "
        "one node (only trials span nodes)"
    )


def gang_sbatch_args(
    gang: Gang, slot_type: str, gres_supported: bool, gpu_type: str | None = None
) -> list[str]:
    """sbatch's node, task and per-node resource arguments for a gang of several nodes (typed
    GPUs with the experiment's `slurm.gpu_type`)."""
    n, k = gang.nodes, gang.slots_per_node
    typed = f"{gpu_type}:{k}" if gpu_type else str(k)
    if slot_type == "cpu":
        per_node = f"--cpus-per-task={k}"
    elif gres_supported:
        per_node = f"--gres=gpu:{typed}"  # --gres counts per node
    else:
        per_node = f"--gpus-per-node={typed}"
    return [f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", per_node]


def srun_prefix(nodes: int) -> list[str]:
    """What the batch script puts before the launcher to run one copy on each node. The job
    was submitted with `--export=NONE`, which srun would inherit (SLURM_EXPORT_ENV): the
    launchers get the script's environment (PATH, PYTHONPATH). One launcher that fails ends
    the others (`--kill-on-bad-exit`), so a gang never waits on a dead member."""
    if nodes <= 1:
        return []
    return [
        "srun",
        "--export=ALL",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
    ]


def container_key(agent_id: str, rank: int) -> str:
    """The allocation's container of node rank `rank` (rank 0, which holds the job's state,
    is the RM's own id): the rendezvous waits for as many containers as the allocation has."""
    return agent_id if rank == 0 else f"{agent_id}#{rank}"
