"""Resource, storage, environment and mount sections of the experiment config."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from detlab.expconf._check import (
    REQUIRED,
    describe,
    expect_int,
    get_absolute_path,
    get_bool,
    get_int,
    get_json,
    get_number,
    get_str,
    get_str_list,
    item,
    join,
    mapping,
)
from detlab.expconf._errors import ConfigError
from detlab.expconf._limits import (
    INT32_MAX,
    MAX_KEEP,
    MAX_SHORT,
    MAX_SLOTS_PER_TRIAL,
    MAX_WEIGHT,
)

# No image named: the docker agent picks its default for the trial's slot type (agent/images:
# detlab/pytorch:2.13.0-cpu or -cuda); only the agent knows whether its slots are GPUs.
DEFAULT_IMAGE: str | None = None
DEFAULT_PRIORITY = 42
STORAGE_TYPES = ("shared_fs", "s3", "gcs")
_STORAGE_COMMON = ("type", "save_experiment_best", "save_trial_best", "save_trial_latest")
_STORAGE_KEYS = {
    "shared_fs": ("host_path", "storage_path", "propagation"),
    "s3": ("bucket", "prefix", "access_key", "secret_key", "endpoint_url"),
    "gcs": ("bucket", "prefix"),
}
_ALL_STORAGE_KEYS = tuple(dict.fromkeys(k for keys in _STORAGE_KEYS.values() for k in keys))
_DEVICES = ("cpu", "cuda", "gpu", "rocm")
_SHM = re.compile(r"^\d+(\.\d+)?\s*([kKmMgGtT]i?)?[bB]?$")
_ENV_NAME = re.compile(r"^[^=\s]+$")


def parse_resources(raw: Any) -> dict[str, Any]:
    """slots_per_trial / resource_pool / priority / weight / max_slots / shm_size / devices."""
    path = "resources"
    keys = (
        "slots_per_trial",
        "resource_pool",
        "priority",
        "weight",
        "max_slots",
        "shm_size",
        "devices",
        "is_single_node",
    )
    fields = mapping(raw if raw is not None else {}, path, keys)
    out = {
        "slots_per_trial": get_int(
            fields, "slots_per_trial", path, 1, minimum=0, limit=MAX_SLOTS_PER_TRIAL
        ),
        "resource_pool": get_str(fields, "resource_pool", path, "default", max_len=MAX_SHORT),
        "priority": get_int(fields, "priority", path, DEFAULT_PRIORITY, minimum=1, maximum=99),
        "weight": get_number(fields, "weight", path, 1.0, above=0.0, at_most=MAX_WEIGHT),
        "max_slots": get_int(fields, "max_slots", path, None, minimum=0, limit=INT32_MAX),
        "shm_size": _shm_size(fields.get("shm_size")),
        "devices": get_json(fields, "devices", path, [], kind=list),
        "is_single_node": get_bool(fields, "is_single_node", path, False),
    }
    if out["max_slots"] is not None and out["max_slots"] < out["slots_per_trial"]:
        raise ConfigError(
            "resources.max_slots",
            f"must be >= slots_per_trial ({out['slots_per_trial']}), got {out['max_slots']}",
        )
    return out


def _shm_size(value: Any) -> Any:
    """Bytes as an int, or a size string like "4G" (Docker's form)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return expect_int(value, "resources.shm_size", minimum=0, limit=2**63 - 1)
    if not _SHM.match(value.strip()):
        raise ConfigError(
            "resources.shm_size", f"expected bytes or a size like '4G', got {describe(value)}"
        )
    return value.strip()


def merge_storage(user: Any, default: Any) -> Any:
    """Lay the user's storage over the master's, unless the user picked another type."""
    if not isinstance(default, Mapping) or not default:
        return user
    if user is None:
        return dict(default)
    if not isinstance(user, Mapping):
        return user
    if user.get("type") is not None and user.get("type") != default.get("type", "shared_fs"):
        return user
    return {**default, **user}


def parse_checkpoint_storage(raw: Any, *, require_location: bool) -> dict[str, Any]:
    """shared_fs (host_path) / s3 / gcs (bucket); every key present in the result."""
    path = "checkpoint_storage"
    raw = raw if raw is not None else {}
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a mapping, got {describe(raw)}")
    kind = get_str(raw, "type", path, "shared_fs", choices=STORAGE_TYPES)
    fields = mapping(raw, path, _STORAGE_COMMON + _ALL_STORAGE_KEYS)
    for key in _ALL_STORAGE_KEYS:
        if key not in _STORAGE_KEYS[kind] and fields.get(key) is not None:
            raise ConfigError(join(path, key), f"not valid for checkpoint storage type {kind}")
    out: dict[str, Any] = {"type": kind}
    out.update({key: None for key in _ALL_STORAGE_KEYS})
    if kind == "shared_fs":
        need = REQUIRED if require_location else None
        out["host_path"] = get_absolute_path(fields, "host_path", path, need)
        out["storage_path"] = _storage_path(fields.get("storage_path"), out["host_path"])
        out["propagation"] = get_str(fields, "propagation", path, "rprivate")
    else:
        out["bucket"] = get_str(fields, "bucket", path, REQUIRED)
        out["prefix"] = get_str(fields, "prefix", path, None, allow_empty=True)
    if kind == "s3":
        for key in ("access_key", "secret_key", "endpoint_url"):
            out[key] = get_str(fields, key, path, None)
    for key, default in (
        ("save_experiment_best", 0),
        ("save_trial_best", 1),
        ("save_trial_latest", 1),
    ):
        out[key] = get_int(fields, key, path, default, minimum=0, limit=MAX_KEEP)
    return out


def _storage_path(value: Any, host_path: str | None) -> str | None:
    """Determined's rule: a subdirectory of host_path, or an absolute path inside it.

    Checkpoints live at `host_path/storage_path/<uuid>` and the master deletes and serves what
    is there: a `storage_path` of `/../../etc` or `../../etc` would point it outside the storage
    root. Returned relative to host_path (normalised), as the harness and the master join it.
    """
    here = "checkpoint_storage.storage_path"
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(here, f"expected a non-empty string, got {describe(value)}")
    if ".." in value.split("/"):
        raise ConfigError(here, f"must stay inside host_path: '..' is not allowed, got {value!r}")
    if not value.startswith("/"):
        return posixpath.normpath(value)
    if host_path is None:
        raise ConfigError(here, "an absolute storage_path needs host_path (it must lie inside it)")
    root, full = posixpath.normpath(host_path), posixpath.normpath(value)
    if full == root:
        return None
    if not full.startswith(root.rstrip("/") + "/"):
        raise ConfigError(
            here, f"must lie inside host_path {host_path!r} (the storage root), got {value!r}"
        )
    return posixpath.relpath(full, root)


def parse_environment(raw: Any) -> dict[str, Any]:
    """image / environment_variables (normalised to a dict) / force_pull_image and friends."""
    path = "environment"
    keys = (
        "image",
        "environment_variables",
        "force_pull_image",
        "ports",
        "registry_auth",
        "add_capabilities",
        "drop_capabilities",
        "pod_spec",
    )
    fields = mapping(raw if raw is not None else {}, path, keys)
    return {
        "image": parse_image(fields.get("image")),
        "environment_variables": _env_vars(fields.get("environment_variables")),
        "force_pull_image": get_bool(fields, "force_pull_image", path, False),
        "ports": get_json(fields, "ports", path, {}, kind=dict),
        "registry_auth": get_json(fields, "registry_auth", path, None, kind=dict),
        "add_capabilities": get_str_list(fields, "add_capabilities", path, []),
        "drop_capabilities": get_str_list(fields, "drop_capabilities", path, []),
        "pod_spec": get_json(fields, "pod_spec", path, None, kind=dict),
    }


def parse_image(value: Any) -> str | dict[str, str] | None:
    """A string, or Determined's per-device mapping ({cpu: ..., cuda: ...}), each image checked.
    The mapping is kept whole: which one runs depends on the slots an agent gives (a CPU
    agent's slot takes the `cpu` image whatever slots_per_trial says), so the agent picks
    (agent/runtime/docker/_build.py), as Determined picked by the pool's slot type."""
    path = "environment.image"
    if value is None:
        return DEFAULT_IMAGE
    if isinstance(value, Mapping):
        fields = mapping(value, path, _DEVICES)
        images = {d: get_str(fields, d, path) for d in _DEVICES if fields.get(d) is not None}
        if not images:
            raise ConfigError(path, "expected at least one of cpu, cuda, gpu, rocm")
        return images
    return get_str({"image": value}, "image", "environment")


def _env_vars(value: Any) -> dict[str, str]:
    """A list of "K=V", a mapping {K: V}, or Determined's {cpu: [...], cuda: [...]} -> {K: V}."""
    path = "environment.environment_variables"
    if value is None:
        return {}
    if isinstance(value, list):
        return _env_vars_at(value, path)
    if not isinstance(value, Mapping):
        raise ConfigError(
            path, f"expected a list of 'KEY=VALUE' or a mapping, got {describe(value)}"
        )
    if value and all(k in _DEVICES and isinstance(v, list) for k, v in value.items()):
        merged: dict[str, str] = {}
        for device in _DEVICES:
            if device in value:
                merged.update(_env_vars_at(value[device], join(path, device)))
        return merged
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ConfigError(path, f"invalid variable name {describe(key)}")
        out[key] = _env_value(val, join(path, key))
    return out


def _env_vars_at(value: list, path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, entry in enumerate(value):
        if not isinstance(entry, str) or "=" not in entry or entry.startswith("="):
            raise ConfigError(item(path, i), f"expected 'KEY=VALUE', got {describe(entry)}")
        key, _, val = entry.partition("=")
        out[key] = val
    return out


def _env_value(value: Any, path: str) -> str:
    """Scalars become the string a shell would see; booleans as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(path, f"expected a string, got {describe(value)}")


def parse_bind_mounts(raw: Any) -> list[dict[str, Any]]:
    """A list of {host_path (absolute), container_path, read_only, propagation}."""
    path = "bind_mounts"
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(path, f"expected a list, got {describe(raw)}")
    out = []
    for i, entry in enumerate(raw):
        here = item(path, i)
        fields = mapping(entry, here, ("host_path", "container_path", "read_only", "propagation"))
        out.append(
            {
                "host_path": get_absolute_path(fields, "host_path", here, REQUIRED),
                "container_path": get_str(fields, "container_path", here, REQUIRED),
                "read_only": get_bool(fields, "read_only", here, False),
                "propagation": get_str(fields, "propagation", here, "rprivate"),
            }
        )
    return out


def parse_reproducibility(raw: Any) -> dict[str, Any]:
    """experiment_seed stays None unless given: the master draws and stores one."""
    path = "reproducibility"
    fields = mapping(raw if raw is not None else {}, path, ("experiment_seed",))
    return {
        "experiment_seed": get_int(
            fields, "experiment_seed", path, None, minimum=0, maximum=2**32 - 1
        )
    }
