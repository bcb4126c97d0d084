"""A pool's `task_container_defaults` pod spec under the experiment's `environment.pod_spec`
(pure).

Determined 0.38's rule: `task_container_defaults.cpu_pod_spec` (or `gpu_pod_spec` for a task
with GPUs) is the base and the experiment's pod spec is merged onto it as a Kubernetes strategic
merge patch: mappings merge key by key, the lists Kubernetes merges by name (containers, volumes,
volume mounts, env, ports...) merge item by item, and any other list or value of the experiment's
replaces the default's.
"""

from __future__ import annotations

import copy
from typing import Any

# Lists whose items Kubernetes' strategic merge patch matches by `name` (the patchMergeKey of
# PodSpec.containers/initContainers/volumes/imagePullSecrets, Container.env/volumeMounts/ports).
_BY_NAME = {
    "containers",
    "initContainers",
    "volumes",
    "volumeMounts",
    "env",
    "ports",
    "imagePullSecrets",
}


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """`patch` merged onto `base` (copies; neither is changed)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for k, v in patch.items():
            out[k] = strategic_merge(out[k], v, k) if k in out else copy.deepcopy(v)
        return out
    if key in _BY_NAME and isinstance(base, list) and isinstance(patch, list):
        out_list = copy.deepcopy(base)
        index = {item.get("name"): i for i, item in enumerate(out_list) if isinstance(item, dict)}
        for item in patch:
            name = item.get("name") if isinstance(item, dict) else None
            if name is not None and name in index:
                out_list[index[name]] = strategic_merge(out_list[index[name]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def pool_pod_spec(
    defaults: dict[str, Any] | None, experiment: dict[str, Any] | None, gpu: bool
) -> dict[str, Any] | None:
    """The pod spec a task starts from: the pool's default for its kind, the experiment's merged
    on top; None when neither gives one."""
    base = (defaults or {}).get("gpu_pod_spec" if gpu else "cpu_pod_spec")
    if not base:
        return copy.deepcopy(experiment) if experiment else None
    if not experiment:
        return copy.deepcopy(base)
    merged: dict[str, Any] = strategic_merge(base, experiment)
    return merged
