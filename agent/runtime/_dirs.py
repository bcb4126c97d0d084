"""The directories a task gets, with the owners and modes isolation needs (docs/security.md).

- The agent's data dir and work dir are 0711: a task passes through them to its own directory
  (and checkpoints) but cannot list them, nor read the model-definition cache (0700), the
  agent's credential (0600) or another task's directory (0700).
- A task's directory is 0700 and, on an isolating agent, owned by the task's identity.
- A shared_fs checkpoint directory the agent creates is 1733 (like /tmp without listing): every
  identity creates its checkpoints there (0700 under the task's umask 077), none lists or
  removes another's. An existing directory is left as its owner made it, unless the agent owns it
  and other identities could not write there at all.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

from agent.identity import TaskIdentity

log = logging.getLogger(__name__)

WORK_DIR_MODE = 0o711
TASK_DIR_MODE = 0o700
SHARED_CHECKPOINTS_MODE = 0o1733


def prepare_agent_dirs(data_dir: Path, work_dir: Path, isolating: bool) -> None:
    """Create the agent's data and work dirs; 0711 when tasks run as other identities (they
    may hold checkpoint storage and the tasks' own dirs, which tasks pass through)."""
    for d in (data_dir, work_dir):
        d.mkdir(parents=True, exist_ok=True)
        if isolating:
            d.chmod(WORK_DIR_MODE)


def make_task_dir(path: Path) -> None:
    """A fresh, private directory for one task (owned by the agent until `hand_over`)."""
    path.mkdir(mode=TASK_DIR_MODE, parents=True)
    path.chmod(TASK_DIR_MODE)  # whatever the agent's umask


def hand_over(path: Path, ident: TaskIdentity | None) -> None:
    """Give a task's directory, and everything extracted into it, to the task's identity."""
    if ident is None:
        return
    os.chown(path, ident.uid, ident.gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), ident.uid, ident.gid, follow_symlinks=False)


def prepare_checkpoint_dir(storage: dict[str, Any], ident: TaskIdentity | None) -> None:
    """Make sure a task running as `ident` can create its checkpoints in shared_fs storage."""
    if ident is None or storage.get("type", "shared_fs") != "shared_fs":
        return
    host_path = storage.get("host_path")
    if not host_path:
        return
    base = Path(host_path)
    if storage.get("storage_path"):
        base = base / str(storage["storage_path"])
    try:
        st = base.stat()
    except FileNotFoundError:
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(SHARED_CHECKPOINTS_MODE)
        log.info("created the checkpoint directory %s (mode 1733)", base)
        return
    if st.st_uid == os.getuid() and not st.st_mode & stat.S_IWOTH:
        base.chmod(SHARED_CHECKPOINTS_MODE)
        log.info(
            "made the checkpoint directory %s writable (not listable) by trials: mode 1733", base
        )
