"""Keys of Determined 0.38's experiment-config schema that detlab accepts without acting on.

Pure. Determined configs carry over: such keys are never a hard error, and never silent either.
`unhonoured(raw)` lists the ones a config sets, each with the reason, for a warning; the keys
the schema would otherwise reject are removed from what detlab stores (`strip_unhonoured`).
Keys whose meaning matters to correctness (an Azure checkpoint storage, say) stay errors.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# Path -> why detlab does not act on it. Paths are top-level keys or "section.key".
UNHONOURED: dict[str, str] = {
    "slurm": "detlab schedules on its own agents, not Slurm",
    "pbs": "detlab schedules on its own agents, not PBS",
    "profiling": "the system-metrics profiler is not provided",
    "optimizations": "Horovod/AMP optimizations are not applied (use torch.amp in the trial)",
    "integrations": "the Pachyderm integration is not provided",
    "log_policies": "log policies are not evaluated",
    "debug": "Determined's debug mode is not provided",
    "checkpoint_policy": "every checkpoint is kept; garbage collection follows save_* only",
    "tensorboard_storage": "TensorBoard is not provided",
    "retention_policy": "log retention is the master's setting",
    "workspace": "detlab has no workspaces",
    "project": "detlab has no projects",
    "environment.proxy_ports": "proxies to trial ports are not provided yet",
    "environment.ports": "proxies to trial ports are not provided yet",
    "environment.pod_spec": "detlab has no Kubernetes resource manager",
    "environment.drop_capabilities": "capabilities are only added (add_capabilities)",
    "resources.native_parallel": "native parallelism was removed from Determined",
    "resources.is_single_node": "trials already use one agent when their slots fit on one",
    "resources.devices": "devices are not passed to containers",
    "checkpoint_storage.container_path": "trials see shared_fs storage at its host_path",
    "checkpoint_storage.checkpoint_path": "trials see shared_fs storage at its host_path",
    "checkpoint_storage.tensorboard_path": "TensorBoard is not provided",
    "searcher.source_trial_id": "warm starts from another trial are not provided",
}

# The subset detlab's schema does not know at all: removed before validation.
STRIPPED = frozenset(
    {
        "slurm",
        "pbs",
        "tensorboard_storage",
        "retention_policy",
        "environment.proxy_ports",
        "resources.native_parallel",
        "checkpoint_storage.container_path",
        "checkpoint_storage.checkpoint_path",
        "checkpoint_storage.tensorboard_path",
    }
)


def _present(raw: Mapping[str, Any], path: str) -> bool:
    section, _, key = path.partition(".")
    if not key:
        return _set(raw.get(section))
    sub = raw.get(section)
    return isinstance(sub, Mapping) and _set(sub.get(key))


def _set(value: Any) -> bool:
    """Set to something that asks for behaviour (`debug: false`, `ports: {}` ask for none)."""
    return value is not None and value is not False and value != {} and value != []


def unhonoured(raw: Any) -> list[tuple[str, str]]:
    """(path, why) for every key `raw` sets that detlab accepts but does not act on."""
    if not isinstance(raw, Mapping):
        return []
    return [(path, why) for path, why in UNHONOURED.items() if _present(raw, path)]


def warnings_for(raw: Any) -> list[str]:
    """One line per unhonoured key, for the CLI and the master's response."""
    return [
        f"{path} is accepted but not honoured by detlab: {why}" for path, why in unhonoured(raw)
    ]


def strip_unhonoured(raw: Any) -> Any:
    """A copy of `raw` without the keys detlab's schema does not know (see STRIPPED)."""
    if not isinstance(raw, Mapping):
        return raw
    out = copy.deepcopy(dict(raw))
    for path in STRIPPED:
        section, _, key = path.partition(".")
        if not key:
            out.pop(section, None)
        elif isinstance(out.get(section), Mapping):
            sub = dict(out[section])
            sub.pop(key, None)
            out[section] = sub
    return out
