"""`core_context.checkpoint`: store checkpoint directories and register them with the master."""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import tempfile
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.api import APIError, NotFound
from harness.api.client import Client
from harness.core._distributed import DistributedContext
from harness.core._jsonable import jsonable
from harness.storage import METADATA_FILE, Selector, StorageManager, list_resources

logger = logging.getLogger("harness.core.checkpoint")


class DownloadMode(enum.Enum):
    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


def _steps(metadata: dict[str, Any] | None) -> int:
    if not metadata or "steps_completed" not in metadata:
        raise ValueError(
            "checkpoint metadata must carry 'steps_completed' (the number of batches trained "
            "when the checkpoint was taken), e.g. {'steps_completed': 1000}"
        )
    steps = metadata["steps_completed"]
    if not isinstance(steps, int) or isinstance(steps, bool):
        raise TypeError(f"metadata['steps_completed'] must be an int, not {type(steps).__name__}")
    return steps


class CheckpointContext:
    """Upload/download checkpoints; registers every stored one with the master (on-cluster)."""

    def __init__(
        self,
        storage: Callable[[], StorageManager],
        distributed: DistributedContext,
        client: Client | None = None,
        trial_id: int | None = None,
        flush_reports: Callable[[], object] | None = None,
    ) -> None:
        self._storage_factory = storage
        self._storage: StorageManager | None = None
        self._dist = distributed
        self._client = client
        self._trial_id = trial_id
        self._flush_reports = flush_reports

    @property
    def storage(self) -> StorageManager:
        """Built on first use, so trials that never checkpoint need no storage config."""
        if self._storage is None:
            self._storage = self._storage_factory()
        return self._storage

    def _new_uuid(self, shard: bool) -> str:
        """A fresh uuid: the chief's alone (shard=False), or the chief's broadcast to all."""
        if not shard:
            self._chief_only()
            return str(uuidlib.uuid4())
        new = str(uuidlib.uuid4()) if self._dist.rank == 0 else None
        return self._dist.broadcast(new) if self._dist.size > 1 else new  # type: ignore[return-value]

    def _chief_only(self) -> None:
        """Determined's rule: with shard=False only the chief uploads (no collective)."""
        if self._dist.rank != 0:
            raise RuntimeError(
                f"upload()/store_path() with shard=False may only be called on the chief worker "
                f"(rank 0), not on rank {self._dist.rank}: guard the call with "
                "`if core_context.distributed.rank == 0`, or pass shard=True on every worker"
            )

    def _finish(self, uuid: str, metadata: dict[str, Any], shard: bool) -> None:
        """Write metadata.json and register (chief only; sharded uploads sync first)."""
        if shard and self._dist.size > 1:
            self._dist.gather(None)  # every worker's files are in place before we list them
        if self._dist.rank != 0:
            return
        meta = jsonable(metadata)
        storage = self.storage
        with tempfile.TemporaryDirectory(prefix="det-ckpt-meta-") as tmp:
            (Path(tmp) / METADATA_FILE).write_text(json.dumps(meta, indent=2))
            storage.upload(Path(tmp), uuid, {METADATA_FILE})
        client, trial_id = self._client, self._trial_id
        if client is None or trial_id is None:
            logger.info("checkpoint %s stored at %s", uuid, storage.location(uuid))
            return
        resources = self._resources(uuid)
        # The metrics reported before this checkpoint reach the master first: a trial that
        # dies after registering it resumes from it and never reports them again, so a
        # validation still in the shipper's queue would be lost for good (seen: a Slurm job
        # killed right after its batch-200 checkpoint lost the batch-200 validation).
        if self._flush_reports is not None:
            self._flush_reports()
        # Rides out a master restart (the session's DET_MASTER_OUTAGE_S): a repeat of a
        # registration that landed (its reply lost) answers the stored record.
        client.report_checkpoint(uuid, trial_id, meta["steps_completed"], meta, resources)
        logger.info("checkpoint %s registered (%d files)", uuid, len(resources))

    def _resources(self, uuid: str) -> dict[str, int]:
        """What the backend holds: registration lists stored files, not what we meant to store."""
        return {k: v for k, v in self.storage.list_files(uuid).items() if not k.endswith("/")}

    def upload(
        self,
        ckpt_dir: str | Path | None,
        metadata: dict[str, Any] | None = None,
        *,
        shard: bool = False,
        selector: Selector | None = None,
    ) -> str:
        """Store a local directory as a new checkpoint; returns its uuid.

        shard=False (the default): the chief alone calls it (a non-chief gets RuntimeError);
        shard=True: every worker calls it with its own files, and all get the same uuid.
        """
        _steps(metadata)
        assert metadata is not None
        uuid = self._new_uuid(shard)
        if self._dist.rank == 0 or shard:
            if ckpt_dir is None:
                raise ValueError(
                    "ckpt_dir is required on the chief (and on every worker with shard)"
                )
            src = Path(ckpt_dir)
            paths = None
            if selector is not None:
                paths = {
                    rel for rel in list_resources(src) if not rel.endswith("/") and selector(rel)
                }
            self.storage.upload(src, uuid, paths)
        self._finish(uuid, dict(metadata), shard)
        return uuid

    @contextlib.contextmanager
    def store_path(
        self, metadata: dict[str, Any] | None = None, *, shard: bool = False
    ) -> Iterator[tuple[Path, str]]:
        """Yield `(path, uuid)` to write a checkpoint into; stored and registered on clean exit.

        Chief only with shard=False (as in Determined); every worker with shard=True.
        """
        _steps(metadata)
        assert metadata is not None
        uuid = self._new_uuid(shard)
        with self.storage.store_path(uuid) as path:
            yield path, uuid
        self._finish(uuid, dict(metadata), shard)

    def download(
        self,
        storage_id: str,
        ckpt_dir: str | Path,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> None:
        """Copy checkpoint `storage_id` into `ckpt_dir` (from storage, else via the master)."""
        dst = Path(ckpt_dir)
        dst.mkdir(parents=True, exist_ok=True)
        if self._storage_has(storage_id):
            self.storage.download(storage_id, dst, selector)
            return
        if self._client is None:
            raise FileNotFoundError(f"checkpoint {storage_id} not found in local storage")
        record = self._client.get_checkpoint(storage_id)
        path = Path(((record.get("storage") or {}).get("path")) or "/nonexistent")
        if path.is_dir():
            from harness.storage.shared_fs import SharedFSStorageManager

            SharedFSStorageManager(path.parent).download(path.name, dst, selector)
            return
        self._client.download_checkpoint(storage_id, dst)

    def _storage_has(self, storage_id: str) -> bool:
        try:
            return self.storage.exists(storage_id)
        except (ValueError, NotImplementedError):
            return False  # no storage configured: fall back to the master

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> Iterator[Path]:
        """Yield a directory holding the checkpoint (in place on shared_fs, else a temp copy)."""
        if self._storage_has(storage_id):
            with self.storage.restore_path(storage_id, selector) as path:
                yield path
            return
        with tempfile.TemporaryDirectory(prefix="det-restore-") as tmp:
            self.download(storage_id, tmp, download_mode, selector=selector)
            yield Path(tmp)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The metadata stored with the checkpoint (includes `steps_completed`)."""
        if self._client is not None:
            try:
                return dict(self._client.get_checkpoint(storage_id).get("metadata") or {})
            except NotFound:
                pass
            except APIError as e:
                logger.warning("could not read checkpoint %s from the master: %s", storage_id, e)
        meta = self.storage.read_metadata(storage_id) if self._storage_has(storage_id) else None
        if meta is None:
            raise FileNotFoundError(f"checkpoint {storage_id} not found")
        return meta

    def delete(self, storage_id: str, globs: list[str] | None = None) -> None:
        """Remove files of a checkpoint from storage (the master's record stays)."""
        if self._dist.rank == 0:
            self.storage.delete(storage_id, globs)
