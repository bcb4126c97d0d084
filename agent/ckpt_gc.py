"""Checkpoint deletions the master hands to an agent (storage only agents can reach).

The action carries the experiment's `checkpoint_storage`; the agent deletes the files, checks
they are gone, and reports the outcome to `POST /api/v1/checkpoints/{uuid}/deleted`.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.client import AgentClient

log = logging.getLogger("agent.ckpt_gc")


def delete_checkpoint(client: AgentClient, uuid: str, storage: dict[str, Any]) -> str | None:
    """Delete one checkpoint's files and report; returns the error (None when deleted)."""
    from harness.storage import build

    error: str | None = None
    try:
        backend = build(dict(storage))
        backend.delete(uuid)
        left = backend.list_files(uuid)
        if left:
            error = f"{len(left)} file(s) still in storage after delete"
    except Exception as e:  # noqa: BLE001 - reported to the master, which retries with backoff
        error = f"{type(e).__name__}: {e}"
    if error:
        log.warning("deleting checkpoint %s failed: %s", uuid, error)
    else:
        log.info("deleted checkpoint %s", uuid)
    client.session.post(
        f"/checkpoints/{uuid}/deleted",
        json={"error": error},
        headers={"X-Agent-Id": client.agent_id},
    )
    return error
