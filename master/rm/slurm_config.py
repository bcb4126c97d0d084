"""`resource_manager: {type: slurm, ...}` in Determined 0.38's form (pure: no I/O).

Determined reached Slurm through its HPC launcher; detlab calls `sbatch`/`squeue`/`scancel`
itself, so the launcher's connection keys (`host`, `port`, `protocol`, `security`, `auth_file`,
...) are accepted and ignored: a 0.38 master config keeps loading. Every error names its key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

SLOT_TYPES = ("cuda", "cpu", "rocm")
CONTAINER_RUN_TYPES = ("singularity", "apptainer", "podman", "enroot")
SUPPORTED_RUN_TYPES = ("podman",)
# Keys of Determined's launcher that detlab has no use for (it runs the Slurm CLI directly).
LAUNCHER_KEYS = frozenset(
    {
        "host",
        "port",
        "protocol",
        "security",
        "auth_file",
        "launcher_container_run_type",
        "singularity_image_root",
        "apptainer_image_root",
        "proxy_network_interface",
        "ld_library_path",
        "group_name",
    }
)
SLURM_KEYS = frozenset(
    {
        "job_storage_root",
        "gres_supported",
        "tres_supported",
        "slot_type",
        "partition_overrides",
        "user_name",
        "sudo_authorized",
        "container_run_type",
        "path",
        "master_host",
        "master_port",
        "rendezvous_network_interface",
    }
)
_OVERRIDE_KEYS = frozenset(
    {"slot_type", "description", "rendezvous_network_interface", "proxy_network_interface"}
)


class SlurmConfigError(ValueError):
    pass


@dataclass(frozen=True)
class PartitionOverride:
    slot_type: str | None = None
    description: str = ""
    rendezvous_network_interface: str | None = None


@dataclass(frozen=True)
class SlurmConfig:
    # Shared storage every node and the master see: job scripts, specs, output and exit files.
    job_storage_root: str
    # `--gres=gpu:N` (True) or `--gpus=N` (False, needs tres_supported) per slot.
    gres_supported: bool = True
    tres_supported: bool = True
    slot_type: str = "cuda"
    partition_overrides: dict[str, PartitionOverride] = field(default_factory=dict)
    # Submit as this Unix user (with `sudo -u` when sudo_authorized); None: the master's own.
    user_name: str | None = None
    sudo_authorized: bool = False
    # None: the launcher runs as a process on the node; "podman": in a container of the
    # experiment's image (master/rm/slurm_podman.py). The other run types are refused.
    container_run_type: str | None = None
    # PATH entries put first in the job (where a venv on shared storage keeps python3).
    path: str | None = None
    # Where jobs reach the master (Determined's keys); None: the master's own host and port.
    master_host: str | None = None
    master_port: int | None = None
    # The network interface whose IPv4 address a gang's chief node gives the others, and NCCL
    # and Gloo use (agent/netif.py); None: the address of the route to the master.
    rendezvous_network_interface: str | None = None

    def rendezvous_interface_of(self, partition: str) -> str | None:
        over = self.partition_overrides.get(partition)
        own = over.rendezvous_network_interface if over else None
        return own or self.rendezvous_network_interface

    def slot_type_of(self, partition: str) -> str:
        over = self.partition_overrides.get(partition)
        return (over.slot_type if over and over.slot_type else None) or self.slot_type


def _bool(raw: dict[str, Any], key: str, path: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise SlurmConfigError(f"{path}.{key} must be true or false, got {value!r}")
    return value


def _opt_str(raw: dict[str, Any], key: str, path: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise SlurmConfigError(f"{path}.{key} must be a non-empty string, got {value!r}")
    return value


def _slot_type(value: Any, where: str) -> str:
    if value not in SLOT_TYPES:
        raise SlurmConfigError(f"{where} must be one of {', '.join(SLOT_TYPES)}, got {value!r}")
    return str(value)


def _overrides(raw: Any, path: str) -> dict[str, PartitionOverride]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SlurmConfigError(f"{path} must be a mapping of partition name to settings")
    out = {}
    for name, item in raw.items():
        where = f"{path}.{name}"
        if not isinstance(item, dict):
            raise SlurmConfigError(f"{where} must be a mapping")
        unknown = sorted(set(item) - _OVERRIDE_KEYS)
        if unknown:
            raise SlurmConfigError(f"{where}: unknown key {unknown[0]!r}")
        slot = item.get("slot_type")
        out[str(name)] = PartitionOverride(
            slot_type=_slot_type(slot, f"{where}.slot_type") if slot is not None else None,
            description=str(item.get("description") or ""),
            rendezvous_network_interface=_interface(
                item.get("rendezvous_network_interface"), f"{where}.rendezvous_network_interface"
            ),
        )
    return out


def parse_slurm(raw: dict[str, Any], path: str) -> SlurmConfig:
    """The Slurm keys of one `resource_manager:` mapping (the common keys are checked by the
    caller, master/rm/config.py)."""
    root = raw.get("job_storage_root")
    if not isinstance(root, str) or not root.startswith("/"):
        raise SlurmConfigError(
            f"{path}.job_storage_root: a slurm resource manager needs an absolute path on "
            f"storage shared by the master and every node, got {root!r}"
        )
    run_type = raw.get("container_run_type")
    if run_type is not None:
        if run_type not in CONTAINER_RUN_TYPES:
            raise SlurmConfigError(
                f"{path}.container_run_type must be one of {', '.join(CONTAINER_RUN_TYPES)}, "
                f"got {run_type!r}"
            )
        if run_type not in SUPPORTED_RUN_TYPES:
            raise SlurmConfigError(
                f"{path}.container_run_type: {run_type} on Slurm is not supported yet (only "
                f"{', '.join(SUPPORTED_RUN_TYPES)}); leave it out to run trials as processes in "
                "the environment on the nodes' shared storage"
            )
    gres = _bool(raw, "gres_supported", path, True)
    tres = _bool(raw, "tres_supported", path, True)
    if not gres and not tres:
        raise SlurmConfigError(
            f"{path}: gres_supported and tres_supported are both false: Slurm then has no way "
            "to give a job GPUs"
        )
    user = _opt_str(raw, "user_name", path)
    sudo = _bool(raw, "sudo_authorized", path, False)
    return SlurmConfig(
        job_storage_root=root.rstrip("/") or "/",
        gres_supported=gres,
        tres_supported=tres,
        slot_type=_slot_type(raw.get("slot_type", "cuda"), f"{path}.slot_type"),
        partition_overrides=_overrides(
            raw.get("partition_overrides"), f"{path}.partition_overrides"
        ),
        user_name=user,
        sudo_authorized=sudo,
        container_run_type=run_type,
        path=_opt_str(raw, "path", path),
        master_host=_opt_str(raw, "master_host", path),
        master_port=_port(raw.get("master_port"), f"{path}.master_port"),
        rendezvous_network_interface=_interface(
            raw.get("rendezvous_network_interface"), f"{path}.rendezvous_network_interface"
        ),
    )


def _interface(value: Any, where: str) -> str | None:
    """A Linux interface name (at most 15 bytes, no '/', ':' or whitespace); "" is unset."""
    if value is None or value == "":
        return None
    if (
        not isinstance(value, str)
        or len(value.encode()) > 15
        or not re.fullmatch(r"[A-Za-z0-9_.\-@]+", value)
    ):
        raise SlurmConfigError(
            f"{where} must be a network interface name such as eth0 or ib0, got {value!r}"
        )
    return value


def _port(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise SlurmConfigError(f"{where} must be a TCP port (1-65535), got {value!r}")
    return value
