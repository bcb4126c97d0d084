"""One batch/v1 Job per allocation (pure: dicts in, a dict out).

parallelism = completions = the gang's pods, Indexed (each pod's JOB_COMPLETION_INDEX is its
container rank), backoffLimit 0 (one failed pod fails the gang, never a retry behind detlab's
back), restartPolicy Never, a TTL after finishing. detlab's scheduler placed the gang, so the pods
are pinned to exactly its nodes (node affinity) and spread one per node (pod anti-affinity): the
cluster's own scheduler only carries out the placement. GPUs are `nvidia.com/gpu` limits.

The experiment's `environment.pod_spec` is merged the way Determined merged it: it is the base;
its container named `determined-container` (added when missing) gets detlab's image, command,
environment (detlab's variables win) and resource limits; other containers (sidecars), volumes,
tolerations and the rest are kept; labels are merged with detlab's winning.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from master.rm.k8s.config import KubernetesConfig
from master.rm.k8s.secrets import secret_env_refs

GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
CONTAINER = "determined-container"
LABEL_PREFIX = "detlab.ai/"
TASK_LABEL = f"{LABEL_PREFIX}task"
ALLOCATION_LABEL = f"{LABEL_PREFIX}allocation"
USER_LABEL = f"{LABEL_PREFIX}user"
RM_LABEL = f"{LABEL_PREFIX}resource-manager"
SPEC_ENV = "DET_K8S_START_SPEC"


@dataclass(frozen=True)
class JobRequest:
    """What one allocation needs: who it is, where detlab placed it, what its pods run."""

    allocation_id: str
    task_id: str
    user: str
    rm_name: str
    nodes: tuple[str, ...]  # one pod per node, in rank order
    slots_per_pod: int
    env: dict[str, str]  # the launcher's environment (the start spec among it)
    pod_spec: dict[str, Any] | None = None  # environment.pod_spec
    image: str | None = None  # environment.image
    # Variables the pods read from the allocation's Secret (secrets.py), never from the spec.
    secret_keys: tuple[str, ...] = ()


def label_value(raw: str) -> str:
    """A label value (<= 63 chars of [A-Za-z0-9._-], alphanumeric at both ends)."""
    s = re.sub(r"[^A-Za-z0-9._-]", "-", raw)[:63].strip("-._")
    return s or "none"


def job_name(allocation_id: str) -> str:
    return f"detlab-{allocation_id}"[:63].rstrip("-")


def labels(req: JobRequest) -> dict[str, str]:
    return {
        TASK_LABEL: label_value(req.task_id),
        ALLOCATION_LABEL: label_value(req.allocation_id),
        USER_LABEL: label_value(req.user),
        RM_LABEL: label_value(req.rm_name),
    }


def resources(cfg: KubernetesConfig, slots: int) -> dict[str, dict[str, str]]:
    """GPUs as limits (the device plugin's only form); a cpu slot as a cpu request and limit."""
    if cfg.slot_type == "cpu":
        cpu = f"{slots * cfg.cpus_per_slot:g}" if slots else "100m"
        return {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    return {"limits": {GPU: str(slots)}} if slots else {}


def _container(base: dict[str, Any], cfg: KubernetesConfig, req: JobRequest) -> dict[str, Any]:
    c = copy.deepcopy(base)
    secret = set(req.secret_keys)
    c["name"] = CONTAINER
    c["image"] = req.image or c.get("image") or cfg.image
    c["command"] = list(cfg.launcher)
    c.pop("args", None)
    ours = dict(req.env)
    env = [
        e for e in c.get("env") or [] if e.get("name") not in ours and e.get("name") not in secret
    ]
    env += [{"name": k, "value": v} for k, v in sorted(ours.items())]
    env += secret_env_refs(job_name(req.allocation_id), req.secret_keys)
    env.append({"name": "DET_K8S_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    env.append({"name": "DET_K8S_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    c["env"] = env
    res = resources(cfg, req.slots_per_pod)
    merged = copy.deepcopy(c.get("resources") or {})
    for kind in ("limits", "requests"):
        if kind in res:
            merged.setdefault(kind, {}).update(res[kind])
    c["resources"] = merged
    return c


def pod_spec(cfg: KubernetesConfig, req: JobRequest) -> dict[str, Any]:
    spec = copy.deepcopy(req.pod_spec.get("spec") or {}) if req.pod_spec else {}
    containers = spec.get("containers") or []
    ours: dict[str, Any] = next((c for c in containers if c.get("name") == CONTAINER), {})
    others = [c for c in containers if c.get("name") != CONTAINER]
    spec["containers"] = [_container(ours, cfg, req), *others]
    spec["restartPolicy"] = "Never"
    if cfg.default_scheduler and not spec.get("schedulerName"):
        spec["schedulerName"] = cfg.default_scheduler
    affinity = spec.setdefault("affinity", {})
    affinity["nodeAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": HOSTNAME, "operator": "In", "values": list(req.nodes)}
                    ]
                }
            ]
        }
    }
    if len(req.nodes) > 1:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {ALLOCATION_LABEL: label_value(req.allocation_id)}
                    },
                    "topologyKey": HOSTNAME,
                }
            ]
        }
    return spec


def job_manifest(cfg: KubernetesConfig, req: JobRequest) -> dict[str, Any]:
    ours = labels(req)
    meta = copy.deepcopy(req.pod_spec.get("metadata") or {}) if req.pod_spec else {}
    meta["labels"] = {**(meta.get("labels") or {}), **ours}
    meta.pop("name", None)
    meta.pop("namespace", None)
    pods = len(req.nodes)
    return {  # the session token is not here: it is in the Secret of the same name
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(req.allocation_id),
            "namespace": cfg.namespace,
            "labels": ours,
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": cfg.job_ttl_seconds,
            "template": {"metadata": meta, "spec": pod_spec(cfg, req)},
        },
    }
