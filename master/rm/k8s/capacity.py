"""A Kubernetes cluster's free slots, as the pure scheduler sees them (pure: dicts in).

Each Ready, schedulable node is one "agent" of the scheduler; its slots are its allocatable
`nvidia.com/gpu` (slot_type cuda) or its allocatable CPUs in slot_resource_requests.cpu units
(slot_type cpu), capped at max_slots_per_pod (one pod per node per allocation). Pods that detlab
did not create (another RM's, or anyone's) take their requests off their node; detlab's own
allocations are subtracted by slot index from detlab's database, the one record of what it
placed, so a gang placed a moment ago counts before its pods exist.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from master.rm.k8s.config import KubernetesConfig
from master.rm.k8s.manifest import GPU, RM_LABEL, label_value
from master.scheduler import AgentView

POOL_LABEL = "detlab.ai/pool"
_QUANTITY = {
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "Ki": 1024.0,
    "Mi": 1024.0**2,
    "Gi": 1024.0**3,
}


def quantity(raw: Any) -> float:
    """A Kubernetes quantity ("500m", "2", "4Gi") as a number (0 for one it cannot read)."""
    s = str(raw).strip()
    for suffix in sorted(_QUANTITY, key=len, reverse=True):
        if s.endswith(suffix):
            try:
                return float(s[: -len(suffix)]) * _QUANTITY[suffix]
            except ValueError:
                return 0.0
    try:
        return float(s)
    except ValueError:
        return 0.0


def node_ready(node: Mapping[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def node_slots(cfg: KubernetesConfig, node: Mapping[str, Any]) -> int:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    if cfg.slot_type == "cpu":
        total = int(math.floor(quantity(alloc.get("cpu", 0)) / cfg.cpus_per_slot + 1e-9))
    else:
        total = int(quantity(alloc.get(GPU, 0)))
    if cfg.max_slots_per_pod is not None:
        total = min(total, cfg.max_slots_per_pod)
    return max(0, total)


def pod_slots(cfg: KubernetesConfig, pod: Mapping[str, Any]) -> int:
    """How many of this RM's slots a (foreign) pod takes on its node: its GPU limits or its CPU
    requests, rounded up."""
    gpus = cpus = 0.0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        gpus += quantity(merged.get(GPU, 0))
        cpus += quantity(merged.get("cpu", 0))
    if cfg.slot_type == "cpu":
        return int(math.ceil(cpus / cfg.cpus_per_slot - 1e-9))
    return int(math.ceil(gpus - 1e-9))


def is_ours(pod: Mapping[str, Any], rm_name: str) -> bool:
    lbl = (pod.get("metadata") or {}).get("labels") or {}
    return lbl.get(RM_LABEL) == label_value(rm_name)


def holds_node(pod: Mapping[str, Any]) -> bool:
    """Whether a pod's requests still count on its node (bound and not finished)."""
    st = pod.get("status") or {}
    return bool((pod.get("spec") or {}).get("nodeName")) and st.get("phase") in (
        "Pending",
        "Running",
        None,
    )


def free_slots(
    cfg: KubernetesConfig,
    rm_name: str,
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    used: Mapping[str, Iterable[int]],
    pools: set[str],
    default_pool: str,
) -> list[AgentView]:
    """One AgentView per ready node of `pools` (a node's pool: its detlab.ai/pool label, else
    `default_pool`). `used`: node -> slot indexes detlab's live allocations hold there."""
    foreign: dict[str, int] = {}
    for pod in pods:
        if holds_node(pod) and not is_ours(pod, rm_name):
            node = pod["spec"]["nodeName"]
            foreign[node] = foreign.get(node, 0) + pod_slots(cfg, pod)
    out = []
    for node in nodes:
        md = node.get("metadata") or {}
        name = md.get("name", "")
        pool = (md.get("labels") or {}).get(POOL_LABEL, default_pool)
        if pool not in pools or not node_ready(node):
            continue
        total = node_slots(cfg, node)
        taken = set(used.get(name, ()))
        # Foreign pods take the highest indexes: detlab's own keep the ones they were given.
        limit = total - foreign.get(name, 0)
        free = tuple(i for i in range(max(0, limit)) if i not in taken)
        out.append(AgentView(id=name, pool=pool, free=free, total=total))
    return sorted(out, key=lambda v: v.id)
