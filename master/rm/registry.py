"""Which resource manager runs each pool, from the master config (`resource_manager:` and
`additional_resource_managers:`; master/rm/config.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import current_app

from detlab.expconf._slurm import ignored_warning, section_set
from master.errors import BadRequest
from master.rm.agent import AgentResourceManager
from master.rm.base import ResourceManager
from master.rm.config import ResourceManagerConfig
from master.rm.slurm import SlurmResourceManager


def _build(rm: ResourceManagerConfig) -> ResourceManager:
    if rm.type == "kubernetes":
        # The kubernetes client is the k8s extra: imported only by a master that has such a pool.
        from master.rm.k8s.manager import KubernetesResourceManager

        return KubernetesResourceManager(rm)
    if rm.type == "slurm":
        return SlurmResourceManager(rm.name)
    return AgentResourceManager(rm.name)


def resource_manager(pool: str) -> ResourceManager:
    """The RM of `pool`; BadRequest naming the pools when the config has no such pool."""
    cfg = current_app.config["DET"]
    for p in cfg.resource_pools:
        if p.name == pool:
            rm = next(r for r in cfg.resource_managers if r.name == p.resource_manager)
            return _build(rm)
    raise BadRequest(
        f"unknown resource pool {pool!r}; this master has {', '.join(cfg.pool_names())}",
        path="resource_pool",
    )


def slurm_pool(pool: str) -> bool:
    """Whether `pool` is a partition of a Slurm resource manager (a `slurm:` section applies)."""
    cfg = current_app.config["DET"]
    for p in cfg.resource_pools:
        if p.name == pool:
            return any(
                r.name == p.resource_manager and r.type == "slurm" for r in cfg.resource_managers
            )
    return False


def slurm_warnings(pool: str, section: Mapping[str, Any] | None) -> list[str]:
    """A `slurm:` section set for a pool that is not Slurm's is accepted and ignored, said so."""
    if section_set(section) and not slurm_pool(pool):
        return [ignored_warning(pool)]
    return []


def pools_by_manager(pools: set[str]) -> dict[str, set[str]]:
    """RM name -> which of `pools` it runs (unknown pools are left out: nothing runs them)."""
    cfg = current_app.config["DET"]
    out: dict[str, set[str]] = {}
    for p in cfg.resource_pools:
        if p.name in pools:
            out.setdefault(p.resource_manager, set()).add(p.name)
    return out


def managers_that_pull() -> list[ResourceManager]:
    """Every configured RM whose states and exits are pulled (`refresh`), not pushed."""
    cfg = current_app.config["DET"]
    return [_build(rm) for rm in cfg.resource_managers if rm.type != "agent"]
