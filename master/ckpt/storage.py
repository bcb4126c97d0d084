"""The master's view of checkpoint storage: build a backend, say whether the master can reach
it, and keep credentials out of everything shown to people."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from harness.storage import StorageManager, build

SECRET_KEYS = ("secret_key", "access_key")
REDACTED = "********"
_SECRET_LINE = re.compile(r"^(\s*(?:secret_key|access_key)\s*:\s*)(\S.*)$", re.MULTILINE)


def redact_storage(storage: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(storage or {})
    for key in SECRET_KEYS:
        if out.get(key):
            out[key] = REDACTED
    return out


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The experiment config with its storage credentials masked (for describe and pages)."""
    out = dict(config)
    if isinstance(out.get("checkpoint_storage"), Mapping):
        out["checkpoint_storage"] = redact_storage(out["checkpoint_storage"])
    return out


def redact_yaml(text: str, storage: Mapping[str, Any] | None = None) -> str:
    """The submitted YAML with `access_key:`/`secret_key:` values masked (block style by the
    key, any style by the values the parsed config's checkpoint `storage` holds)."""
    out = _SECRET_LINE.sub(lambda m: m.group(1) + REDACTED, text or "")
    for key in SECRET_KEYS:
        value = (storage or {}).get(key)
        if isinstance(value, str) and value:
            out = out.replace(value, REDACTED)
    return out


def public_location(storage: Mapping[str, Any], uuid: str) -> dict[str, Any]:
    """What a checkpoint record says about where its files are (no credentials)."""
    kind = storage.get("type", "shared_fs")
    out: dict[str, Any] = {"type": kind}
    if kind == "shared_fs":
        if storage.get("host_path"):
            base = storage["host_path"]
            if storage.get("storage_path"):
                base = os.path.join(base, storage["storage_path"])
            out["path"] = os.path.join(base, uuid)
        return out
    out["bucket"] = storage.get("bucket")
    out["prefix"] = storage.get("prefix")
    if storage.get("endpoint_url"):
        out["endpoint_url"] = storage["endpoint_url"]
    return out


def master_can_reach(storage: Mapping[str, Any]) -> bool:
    """Object stores: yes (the master has the config's credentials or its own chain);
    shared_fs: only when the base directory is mounted on the master too."""
    if storage.get("type", "shared_fs") != "shared_fs":
        return True
    base = storage.get("host_path")
    if not base:
        return False
    if storage.get("storage_path"):
        base = os.path.join(base, storage["storage_path"])
    return os.path.isdir(base)


def backend(storage: Mapping[str, Any]) -> StorageManager:
    """One backend (and so one SDK client and connection pool) per distinct config: building a
    boto3 client costs far more than deleting a small checkpoint."""
    from master.context import master_state

    key = json.dumps(dict(storage), sort_keys=True, default=str)
    ms = master_state()
    with ms.checkpoints.storage_backends_lock:
        cache = ms.checkpoints.storage_backends
        found = cache.get(key)
        if found is None:
            if len(cache) > 64:
                cache.clear()
            found = cache[key] = build(dict(storage))
        return found
