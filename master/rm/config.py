"""The master config's resource managers, as Determined 0.38 names them (pure: no I/O).

    resource_manager: {type: agent}            # the default RM; `resource_pools:` are its pools
    additional_resource_managers:
      - resource_manager: {type: agent, name: lab-b}
        resource_pools: [{pool_name: b}]

A master config without `resource_manager:` keeps working unchanged: its `resource_pools:` belong
to one agent RM named "default". Every pool belongs to exactly one RM; errors name the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from master.rm.k8s.config import KubernetesConfig, KubernetesConfigError, parse_kubernetes
from master.rm.slurm_config import (
    LAUNCHER_KEYS,
    SLURM_KEYS,
    SlurmConfig,
    SlurmConfigError,
    parse_slurm,
)

DEFAULT_RM = "default"
# The resource manager types this master implements (master/rm/registry.py builds each).
RM_TYPES = ("agent", "slurm", "kubernetes")


class RMConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ResourceManagerConfig:
    name: str = DEFAULT_RM
    type: str = "agent"
    # Determined's defaults for tasks that name no pool: compute (slots > 0) and aux (0 slots).
    default_compute_resource_pool: str | None = None
    default_aux_resource_pool: str | None = None
    # The `slurm` type's own keys (master/rm/slurm_config.py); None for other types.
    slurm: SlurmConfig | None = None
    # type kubernetes: its own keys (master/rm/k8s/config.py); None for other types.
    kubernetes: KubernetesConfig | None = None


_RM_KEYS = {"type", "name", "default_compute_resource_pool", "default_aux_resource_pool"}


def parse_rm(raw: Any, path: str, *, default_name: str | None) -> ResourceManagerConfig:
    """One `resource_manager:` mapping. An additional RM must be named (`default_name` None)."""
    if not isinstance(raw, dict):
        raise RMConfigError(f"{path} must be a mapping with a type, got {type(raw).__name__}")
    rm_type = raw.get("type")
    unknown = sorted(set(raw) - _RM_KEYS)
    if unknown and rm_type not in ("slurm", "kubernetes"):
        raise RMConfigError(f"{path}: unknown key {unknown[0]!r}")
    if rm_type not in RM_TYPES:
        raise RMConfigError(
            f"{path}.type: resource manager type {rm_type!r} is not one this master runs "
            f"(it runs: {', '.join(RM_TYPES)})"
        )
    if rm_type == "slurm":
        # The kubernetes type's own keys are checked by parse_kubernetes below.
        unknown = sorted(set(raw) - (_RM_KEYS | SLURM_KEYS | LAUNCHER_KEYS))
        if unknown:
            raise RMConfigError(f"{path}: unknown key {unknown[0]!r}")
    slurm = None
    if rm_type == "slurm":
        try:
            slurm = parse_slurm(raw, path)
        except SlurmConfigError as e:
            raise RMConfigError(str(e)) from e
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise RMConfigError(f"{path}.name: an additional resource manager needs a name")
    for key in ("default_compute_resource_pool", "default_aux_resource_pool"):
        if raw.get(key) is not None and not isinstance(raw.get(key), str):
            raise RMConfigError(f"{path}.{key} must be a pool name")
    k8s = None
    if rm_type == "kubernetes":
        try:
            k8s = parse_kubernetes({k: raw[k] for k in unknown}, path)
        except KubernetesConfigError as e:
            raise RMConfigError(str(e)) from e
    return ResourceManagerConfig(
        name=name,
        type=rm_type,
        kubernetes=k8s,
        default_compute_resource_pool=raw.get("default_compute_resource_pool"),
        default_aux_resource_pool=raw.get("default_aux_resource_pool"),
        slurm=slurm,
    )


def implied_pools(rm: ResourceManagerConfig) -> list[str]:
    """The pools of an RM whose config lists none: a Slurm RM's are the partitions its config
    names (`partition_overrides`, the default pools); an agent RM's the one "default" pool."""
    if rm.slurm is None:
        return ["default"]
    names = list(rm.slurm.partition_overrides)
    for pool in (rm.default_compute_resource_pool, rm.default_aux_resource_pool):
        if pool is not None and pool not in names:
            names.append(pool)
    if not names:
        raise RMConfigError(
            f"resource manager {rm.name!r} (slurm): name its partitions, as resource_pools "
            "(pool_name: the partition) or as default_compute_resource_pool"
        )
    return names


def parse_additional(raw: Any) -> list[tuple[ResourceManagerConfig, Any]]:
    """`additional_resource_managers:`: (RM, its raw `resource_pools`) per entry."""
    path = "additional_resource_managers"
    if not isinstance(raw, list):
        raise RMConfigError(f"{path} must be a list")
    out = []
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise RMConfigError(f"{where} must be a mapping")
        unknown = sorted(set(item) - {"resource_manager", "resource_pools"})
        if unknown:
            raise RMConfigError(f"{where}: unknown key {unknown[0]!r}")
        if "resource_pools" not in item:
            raise RMConfigError(f"{where}.resource_pools: each resource manager needs its pools")
        rm = parse_rm(item.get("resource_manager"), f"{where}.resource_manager", default_name=None)
        out.append((rm, item["resource_pools"]))
    return out


def check_unique(rms: list[ResourceManagerConfig], pools_of: dict[str, list[str]]) -> None:
    """RM names unique; every pool name in one RM only; an RM's default pools are its own."""
    seen: set[str] = set()
    for rm in rms:
        if rm.name in seen:
            raise RMConfigError(f"two resource managers are named {rm.name!r}")
        seen.add(rm.name)
    owner: dict[str, str] = {}
    for rm_name, pools in pools_of.items():
        for pool in pools:
            if pool in owner:
                raise RMConfigError(
                    f"resource pool {pool!r} is in resource managers {owner[pool]!r} and "
                    f"{rm_name!r}; a pool belongs to one"
                )
            owner[pool] = rm_name
    for rm in rms:
        for key in ("default_compute_resource_pool", "default_aux_resource_pool"):
            pool = getattr(rm, key)
            if pool is not None and pool not in pools_of.get(rm.name, []):
                raise RMConfigError(
                    f"resource manager {rm.name!r}: {key} {pool!r} is not one of its pools"
                )
