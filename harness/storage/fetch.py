"""Fetch a registered checkpoint's files for a person: straight from its storage when this
machine can read it (shared disk, or object-store credentials from the default chain), else
through the master (which reads the storage with the experiment's own credentials)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from harness.api.client import Client
from harness.storage import build

logger = logging.getLogger("harness.storage.fetch")


def direct(record: dict[str, Any], dest: Path) -> str:
    """Copy from the storage named in the record; returns where from; raises if it cannot."""
    storage = record.get("storage") or {}
    uuid = record["uuid"]
    kind = storage.get("type", "shared_fs")
    if kind == "shared_fs":
        src = Path(storage["path"]) if storage.get("path") else None
        if src is None or not src.is_dir():
            raise FileNotFoundError(f"{src} is not mounted here")
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
        return str(src)
    config = {k: storage.get(k) for k in ("type", "bucket", "prefix", "endpoint_url")}
    backend = build(config)  # credentials: this machine's default chain, never the master's
    backend.download(uuid, dest)
    return backend.location(uuid)


def download(
    client: Client, uuid: str, dest: str | Path, *, via_master: bool = False
) -> tuple[Path, str]:
    """Download checkpoint `uuid` into `dest`; returns `(dest, how)` for messages."""
    dest = Path(dest)
    record = client.get_checkpoint(uuid)
    if record.get("state") not in (None, "ACTIVE", "COMPLETED"):
        raise FileNotFoundError(f"checkpoint {uuid} is {record['state']}: its files are gone")
    if not via_master:
        try:
            dest.mkdir(parents=True, exist_ok=True)
            return dest, f"from {direct(record, dest)}"
        except Exception as e:  # noqa: BLE001 - any reason to not read it here: ask the master
            logger.info("cannot read checkpoint %s directly (%s); asking the master", uuid, e)
    client.download_checkpoint(uuid, dest)
    return dest, "through the master"
