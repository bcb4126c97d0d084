"""Checkpoints in a Google Cloud Storage bucket through google-cloud-storage.

Credentials come from Application Default Credentials. When `STORAGE_EMULATOR_HOST` is set (a
local emulator), the client talks to it anonymously. Many files move concurrently through the
SDK's transfer manager (threads).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import storage
from google.cloud.storage import transfer_manager

from harness.storage._object import DEFAULT_CONCURRENCY, ObjectStorageManager


def make_client(project: str | None = None) -> storage.Client:
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=project or "detlab", credentials=AnonymousCredentials())
    return storage.Client(project=project) if project else storage.Client()


class GCSStorageManager(ObjectStorageManager):
    scheme = "gs"

    def __init__(
        self,
        bucket: str,
        prefix: str | None = None,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        temp_dir: str | None = None,
        client: storage.Client | None = None,
    ) -> None:
        super().__init__(bucket, prefix, temp_dir)
        self.concurrency = concurrency
        self.client = client or make_client()
        self._bucket = self.client.bucket(bucket)

    def __repr__(self) -> str:
        return f"GCSStorageManager(bucket={self.bucket!r}, prefix={self.prefix!r})"

    @staticmethod
    def _raise_first(results: list[Any]) -> None:
        for r in results:
            if isinstance(r, BaseException):
                raise r

    def _upload_files(self, files: list[tuple[Path, str]]) -> None:
        pairs = [(str(path), self._bucket.blob(key)) for path, key in files]
        results = transfer_manager.upload_many(
            pairs,
            skip_if_exists=False,
            raise_exception=True,
            worker_type=transfer_manager.THREAD,
            max_workers=self.concurrency,
        )
        self._raise_first(results)

    def _download_files(
        self, files: list[tuple[str, Path]], sizes: dict[str, int] | None = None
    ) -> None:
        pairs = [(self._bucket.blob(key), str(path)) for key, path in files]
        results = transfer_manager.download_many(
            pairs,
            raise_exception=True,
            worker_type=transfer_manager.THREAD,
            max_workers=self.concurrency,
        )
        self._raise_first(results)

    def _list(self, prefix: str) -> dict[str, int]:
        return {
            b.name: int(b.size or 0) for b in self.client.list_blobs(self.bucket, prefix=prefix)
        }

    def _delete_keys(self, keys: list[str]) -> None:
        for key in keys:
            try:
                self._bucket.blob(key).delete()
            except gexc.NotFound:
                pass  # already gone counts as deleted

    def _list_times(self, prefix: str) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        for b in self.client.list_blobs(self.bucket, prefix=prefix):
            when = b.updated or b.time_created
            out[b.name] = when if when.tzinfo else when.replace(tzinfo=UTC)
        return out

    def _read(self, key: str) -> bytes | None:
        try:
            return self._bucket.blob(key).download_as_bytes()
        except gexc.NotFound:
            return None


def from_config(config: dict[str, Any]) -> GCSStorageManager:
    return GCSStorageManager(
        str(config.get("bucket") or ""), config.get("prefix"), temp_dir=config.get("temp_dir")
    )
