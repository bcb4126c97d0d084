"""A resource pool's `provider` section (Determined 0.38's keys), parsed and checked.

Every error names the path of the bad field (`resource_pools[1].provider.max_instances`). Keys
of Determined's schema that detlab does not honour are accepted and listed in `ignored`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from master.provisioner.aws_types import known_families, slots_for


class ProviderConfigError(ValueError):
    pass


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(value: Any, path: str) -> float:
    """Seconds from a number or a Go-style duration ('5m', '1h30m', '45s', '1.5s')."""
    if isinstance(value, bool):
        raise ProviderConfigError(f"{path}: expected a duration like '5m', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value and (m := _DURATION.match(value.strip())):
        h, mi, s = (float(x) if x else 0.0 for x in m.groups())
        seconds = h * 3600 + mi * 60 + s
    else:
        raise ProviderConfigError(f"{path}: expected a duration like '5m' or '30s', got {value!r}")
    if seconds <= 0:
        raise ProviderConfigError(f"{path}: must be positive, got {value!r}")
    return seconds


COMMON = {
    "type",
    "min_instances",
    "max_instances",
    "max_idle_agent_period",
    "max_agent_starting_period",
    "instance_type",
    "instance_slots",
    "startup_script",
    "master_url",
    "launch_error_backoff",
}
# Determined's keys that detlab accepts without acting on them.
IGNORED_COMMON = {
    "master_cert_name",
    "container_startup_script",
    "agent_docker_network",
    "agent_docker_runtime",
    "agent_docker_image",
    "agent_fluent_image",
    "agent_reconnect_attempts",
    "agent_reconnect_backoff",
    "launch_error_timeout",
    "launch_error_retries",
    "cpu_slots_allowed",
}
AWS_KEYS = {
    "region",
    "image_id",
    "tag_key",
    "tag_value",
    "network_interface",
    "iam_instance_profile_arn",
    "spot",
    "spot_max_price",
    "custom_tags",
    "root_volume_size",
    "ssh_key_name",
    "instance_name",
    "endpoint_url",
}
GCP_KEYS = {
    "project",
    "zone",
    "boot_disk_size",
    "boot_disk_source_image",
    "label_key",
    "label_value",
    "name_prefix",
    "network_interface",
    "network_tags",
    "service_account",
    "api_endpoint",
    "operation_timeout_period",
}
IGNORED_GCP = {"base_config"}


@dataclass(frozen=True)
class GcpInstanceType:
    machine_type: str = "n1-standard-32"
    gpu_type: str = "nvidia-tesla-t4"
    gpu_num: int = 4
    preemptible: bool = False


@dataclass(frozen=True)
class ProviderConfig:
    type: str
    min_instances: int = 0
    max_instances: int = 5
    max_idle_agent_period: float = 300.0
    max_agent_starting_period: float = 1200.0
    instance_slots: int = 1
    startup_script: str = ""
    master_url: str = ""
    launch_error_backoff: float = 30.0  # first retry delay after a failed launch (doubles, 10m cap)
    # AWS
    region: str = "us-west-2"
    image_id: str = ""
    aws_instance_type: str = "g4dn.metal"
    tag_key: str = "detlab-master"
    tag_value: str = ""  # default: the master's cluster id
    network_interface: dict[str, Any] = field(default_factory=dict)
    iam_instance_profile_arn: str = ""
    spot: bool = False
    spot_max_price: str = ""
    custom_tags: tuple[tuple[str, str], ...] = ()
    root_volume_size: int = 200
    ssh_key_name: str = ""
    instance_name: str = "det-agent"
    endpoint_url: str = ""
    # GCP
    project: str = ""
    zone: str = ""
    gcp_instance_type: GcpInstanceType = GcpInstanceType()
    boot_disk_size: int = 200
    boot_disk_source_image: str = ""
    label_key: str = "detlab-master"
    label_value: str = ""
    name_prefix: str = "det-agent-"
    network_tags: tuple[str, ...] = ()
    service_account: dict[str, Any] = field(default_factory=dict)
    api_endpoint: str = ""
    operation_timeout_period: float = 300.0
    ignored: tuple[str, ...] = ()

    @property
    def instance_type_name(self) -> str:
        return self.aws_instance_type if self.type == "aws" else self.gcp_instance_type.machine_type


def _int(raw: dict, key: str, path: str, default: int, minimum: int = 0) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProviderConfigError(f"{path}.{key}: expected an integer >= {minimum}, got {value!r}")
    return value


def _str(raw: dict, key: str, path: str, default: str = "") -> str:
    value = raw.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ProviderConfigError(f"{path}.{key}: expected a string, got {value!r}")
    return value


def _bool(raw: dict, key: str, path: str, default: bool = False) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ProviderConfigError(f"{path}.{key}: expected true or false, got {value!r}")
    return value


def _dict(raw: dict, key: str, path: str) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise ProviderConfigError(f"{path}.{key}: expected a mapping, got {value!r}")
    return value


def parse_provider(raw: Any, path: str) -> ProviderConfig:
    """Check a `provider` mapping; raise ProviderConfigError naming the bad field's path."""
    if not isinstance(raw, dict):
        raise ProviderConfigError(f"{path}: expected a mapping, got {raw!r}")
    kind = raw.get("type")
    if kind not in ("aws", "gcp"):
        raise ProviderConfigError(f"{path}.type: expected 'aws' or 'gcp', got {kind!r}")
    known = COMMON | IGNORED_COMMON | (AWS_KEYS if kind == "aws" else GCP_KEYS | IGNORED_GCP)
    for key in raw:
        if key not in known:
            raise ProviderConfigError(f"{path}.{key}: unknown key for a {kind} provider")
    ignored = tuple(sorted(k for k in raw if k in IGNORED_COMMON | IGNORED_GCP))
    kw: dict[str, Any] = {
        "type": kind,
        "min_instances": _int(raw, "min_instances", path, 0),
        "max_instances": _int(raw, "max_instances", path, 5),
        "instance_slots": _int(raw, "instance_slots", path, 0),
        "startup_script": _str(raw, "startup_script", path),
        "master_url": _str(raw, "master_url", path),
        "ignored": ignored,
    }
    if kw["min_instances"] > kw["max_instances"]:
        raise ProviderConfigError(
            f"{path}.min_instances: {kw['min_instances']} is above max_instances "
            f"({kw['max_instances']})"
        )
    for key, default in (
        ("max_idle_agent_period", 300.0),
        ("max_agent_starting_period", 1200.0),
        ("launch_error_backoff", 30.0),
    ):
        kw[key] = parse_duration(raw.get(key, default), f"{path}.{key}")
    if kind == "aws":
        _aws(raw, path, kw)
    else:
        _gcp(raw, path, kw)
    if kw["instance_slots"] == 0:
        raise ProviderConfigError(
            f"{path}.instance_slots: required (how many slots one instance offers)"
        )
    return ProviderConfig(**kw)


def _aws(raw: dict, path: str, kw: dict[str, Any]) -> None:
    for key in ("region", "image_id", "tag_key", "tag_value", "iam_instance_profile_arn"):
        kw[key] = _str(raw, key, path, getattr(ProviderConfig, key, ""))
    for key in ("spot_max_price", "ssh_key_name", "instance_name", "endpoint_url"):
        kw[key] = _str(raw, key, path, getattr(ProviderConfig, key, ""))
    if not kw["image_id"]:
        raise ProviderConfigError(f"{path}.image_id: required for an aws provider")
    itype = raw.get("instance_type", ProviderConfig.aws_instance_type)
    if not isinstance(itype, str) or not itype:
        raise ProviderConfigError(f"{path}.instance_type: expected a string, got {itype!r}")
    kw["aws_instance_type"] = itype
    if kw["instance_slots"] == 0:
        known = slots_for(itype)
        if known is None:
            raise ProviderConfigError(
                f"{path}.instance_slots: required for instance type {itype!r}, whose GPU count "
                f"detlab does not know (known families: {', '.join(known_families())})"
            )
        kw["instance_slots"] = known
    kw["spot"] = _bool(raw, "spot", path)
    kw["root_volume_size"] = _int(raw, "root_volume_size", path, 200, 1)
    kw["network_interface"] = _dict(raw, "network_interface", path)
    tags = raw.get("custom_tags") or []
    if not isinstance(tags, list):
        raise ProviderConfigError(f"{path}.custom_tags: expected a list of {{key, value}}")
    pairs = []
    for i, t in enumerate(tags):
        if (
            not isinstance(t, dict)
            or not isinstance(t.get("key"), str)
            or not isinstance(t.get("value"), str)
        ):
            raise ProviderConfigError(
                f"{path}.custom_tags[{i}]: expected {{key: string, value: string}}"
            )
        pairs.append((t["key"], t["value"]))
    kw["custom_tags"] = tuple(pairs)


def _gcp(raw: dict, path: str, kw: dict[str, Any]) -> None:
    for key in ("project", "zone"):
        kw[key] = _str(raw, key, path)
        if not kw[key]:
            raise ProviderConfigError(f"{path}.{key}: required for a gcp provider")
    for key in ("boot_disk_source_image", "label_key", "label_value", "name_prefix"):
        kw[key] = _str(raw, key, path, getattr(ProviderConfig, key, ""))
    kw["api_endpoint"] = _str(raw, "api_endpoint", path)
    kw["boot_disk_size"] = _int(raw, "boot_disk_size", path, 200, 1)
    kw["network_interface"] = _dict(raw, "network_interface", path)
    kw["service_account"] = _dict(raw, "service_account", path)
    tags = raw.get("network_tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ProviderConfigError(f"{path}.network_tags: expected a list of strings")
    kw["network_tags"] = tuple(tags)
    kw["operation_timeout_period"] = parse_duration(
        raw.get("operation_timeout_period", 300.0), f"{path}.operation_timeout_period"
    )
    it = raw.get("instance_type", {})
    if not isinstance(it, dict):
        raise ProviderConfigError(
            f"{path}.instance_type: expected {{machine_type, gpu_type, gpu_num, preemptible}}"
        )
    ipath = f"{path}.instance_type"
    unknown = set(it) - {"machine_type", "gpu_type", "gpu_num", "preemptible"}
    if unknown:
        raise ProviderConfigError(f"{ipath}.{sorted(unknown)[0]}: unknown key")
    d = GcpInstanceType()
    gcp_type = GcpInstanceType(
        machine_type=_str(it, "machine_type", ipath, d.machine_type),
        gpu_type=_str(it, "gpu_type", ipath, d.gpu_type),
        gpu_num=_int(it, "gpu_num", ipath, d.gpu_num),
        preemptible=_bool(it, "preemptible", ipath),
    )
    kw["gcp_instance_type"] = gcp_type
    if kw["instance_slots"] == 0 and gcp_type.gpu_num > 0:
        kw["instance_slots"] = gcp_type.gpu_num
