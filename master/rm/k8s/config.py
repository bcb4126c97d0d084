"""`resource_manager: {type: kubernetes, ...}` in Determined 0.38's form (pure: no I/O).

    resource_manager:
      type: kubernetes
      namespace: detlab              # Determined 0.38 also spells it default_namespace
      max_slots_per_pod: 8           # a gang's placement on one node is one pod of <= this
      slot_type: cuda                # or cpu: a slot is slot_resource_requests.cpu CPUs
      slot_resource_requests: {cpu: 2}
      kubeconfig_path: ~/.kube/config   # unset: in-cluster config (the master's service account)
      default_scheduler: ""          # a pod's schedulerName (unset: the cluster's default)
      master_url: http://detlab-master.detlab:8080   # how pods reach the master
      image: detlab/task:latest      # the image of a task's container
      pending_timeout: 300           # seconds a pod may stay Unschedulable before requeueing
      job_ttl_seconds: 600           # ttlSecondsAfterFinished of every Job
      log_followers: 256             # pod logs streamed at once (more pods take turns)
      launcher: [python3, -m, agent.podstart]   # what starts a task in its container

Errors name the key (`resource_manager.max_slots_per_pod: ...`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SLOT_TYPES = ("cuda", "cpu")
# Determined 0.38's keys this master accepts but has no use for (fluent: it reads pod logs
# through the API instead of a Fluent Bit sidecar).
IGNORED_KEYS = {
    "fluent",
    "master_service_name",
    "cluster_name",
    "determined_master_host",
    "determined_master_port",
    "determined_master_scheme",
    "credentials",
    "default_namespace_quota",
    "internal_task_gateway",
}
KEYS = {
    "namespace",
    "default_namespace",
    "max_slots_per_pod",
    "slot_type",
    "slot_resource_requests",
    "kubeconfig_path",
    "default_scheduler",
    "master_url",
    "image",
    "pending_timeout",
    "job_ttl_seconds",
    "watch_timeout",
    "log_followers",
    "launcher",
} | IGNORED_KEYS


class KubernetesConfigError(ValueError):
    pass


@dataclass(frozen=True)
class KubernetesConfig:
    namespace: str = "default"
    max_slots_per_pod: int | None = None
    slot_type: str = "cuda"
    cpus_per_slot: float = 1.0
    kubeconfig_path: str | None = None
    default_scheduler: str | None = None
    master_url: str | None = None  # None: the master's own URL (a master beside the cluster)
    image: str = "detlab/task:latest"
    pending_timeout: float = 300.0
    job_ttl_seconds: int = 600
    # A watch is re-opened this often (the server ends it anyway; a shorter one bounds how long
    # a silently dead connection goes unnoticed).
    watch_timeout: int = 60
    # Pod logs streamed at once (a thread and an HTTP stream each); more pods take turns.
    log_followers: int = 256
    # The argv that starts a task in its container (agent/podstart.py, installed in `image`).
    launcher: tuple[str, ...] = ("python3", "-m", "agent.podstart")
    ignored: tuple[str, ...] = field(default_factory=tuple)


def _number(raw: dict[str, Any], key: str, path: str, *, minimum: float, integer: bool) -> Any:
    val = raw[key]
    ok = isinstance(val, int) if integer else isinstance(val, int | float)
    if isinstance(val, bool) or not ok or val < minimum:
        kind = "an integer" if integer else "a number"
        raise KubernetesConfigError(f"{path}.{key} must be {kind} >= {minimum:g}, got {val!r}")
    return val


def _string(raw: dict[str, Any], key: str, path: str) -> str:
    val = raw[key]
    if not isinstance(val, str) or not val.strip():
        raise KubernetesConfigError(f"{path}.{key} must be a non-empty string, got {val!r}")
    return val.strip()


def _slots(raw: dict[str, Any], path: str) -> dict[str, Any]:
    """max_slots_per_pod, slot_type and slot_resource_requests."""
    out: dict[str, Any] = {}
    if raw.get("max_slots_per_pod") is not None:
        out["max_slots_per_pod"] = _number(raw, "max_slots_per_pod", path, minimum=1, integer=True)
    if "slot_type" in raw:
        if raw["slot_type"] not in SLOT_TYPES:
            raise KubernetesConfigError(
                f"{path}.slot_type must be one of {', '.join(SLOT_TYPES)}, got {raw['slot_type']!r}"
            )
        out["slot_type"] = raw["slot_type"]
    if "slot_resource_requests" in raw:
        req = raw["slot_resource_requests"]
        if not isinstance(req, dict) or set(req) - {"cpu"}:
            raise KubernetesConfigError(
                f"{path}.slot_resource_requests must be a mapping with only cpu, got {req!r}"
            )
        if "cpu" in req:
            out["cpus_per_slot"] = _number(
                req, "cpu", f"{path}.slot_resource_requests", minimum=0.001, integer=False
            )
    return out


def parse_kubernetes(raw: dict[str, Any], path: str) -> KubernetesConfig:
    """The Kubernetes keys of one `resource_manager:` mapping (type, name and the default pools
    are the caller's)."""
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise KubernetesConfigError(f"{path}: unknown key {unknown[0]!r} for type kubernetes")
    out: dict[str, Any] = {}
    if "namespace" in raw and "default_namespace" in raw:
        raise KubernetesConfigError(f"{path}: give namespace or default_namespace, not both")
    for key in ("namespace", "default_namespace"):
        if key in raw:
            out["namespace"] = _string(raw, key, path)
    out.update(_slots(raw, path))
    for key in ("kubeconfig_path", "default_scheduler", "master_url", "image"):
        if raw.get(key) is not None:
            out[key] = _string(raw, key, path)
    if "master_url" in out and not out["master_url"].startswith(("http://", "https://")):
        raise KubernetesConfigError(f"{path}.master_url must be an http(s) URL")
    if "pending_timeout" in raw:
        out["pending_timeout"] = float(
            _number(raw, "pending_timeout", path, minimum=1, integer=False)
        )
    for key in ("job_ttl_seconds", "watch_timeout", "log_followers"):
        if key in raw:
            out[key] = _number(raw, key, path, minimum=1, integer=True)
    if "launcher" in raw:
        argv = raw["launcher"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise KubernetesConfigError(f"{path}.launcher must be a non-empty list of strings")
        out["launcher"] = tuple(argv)
    out["ignored"] = tuple(sorted(set(raw) & IGNORED_KEYS))
    return KubernetesConfig(**out)
