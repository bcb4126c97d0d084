"""Checkpoints in a Google Cloud Storage bucket through google-cloud-storage.

Credentials come from Application Default Credentials. When `STORAGE_EMULATOR_HOST` is set (a
local emulator), the client talks to it anonymously. Many files move concurrently (a thread per
file in flight, as the SDK's transfer manager does), each journaled as it finishes so a killed
transfer restarts with the files it had not finished; a large file goes up through a resumable
upload session whose URL is journaled, so a restarted upload continues it (`gcs_resume.py`).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import storage

from harness.storage._object import DEFAULT_CONCURRENCY, ObjectStorageManager
from harness.storage.gcs_resume import CHUNK, RESUMABLE_THRESHOLD, upload_resumable
from harness.storage.journal import Journal
from harness.storage.ranged import RangedDownload, run_transfers


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

    def _run(self, jobs: list[Any]) -> None:
        """Run the callables on `concurrency` threads; raise the first failure."""
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="det-gcs") as pool:
            futures = [pool.submit(job) for job in jobs]
            for f in futures:
                f.result()

    def _upload_files(self, files: list[tuple[Path, str]], journal: Journal | None = None) -> None:
        # One thread per file in flight (what the SDK's transfer manager does with THREAD
        # workers), each journaled as it finishes: a restarted upload skips the finished ones.
        journal = journal or Journal(None)

        def job(path: Path, key: str) -> Any:
            def run() -> None:
                st = path.stat()
                if st.st_size >= RESUMABLE_THRESHOLD:
                    upload_resumable(self._bucket, self.client._http, path, key, journal)
                    return
                self._bucket.blob(key).upload_from_filename(str(path))
                journal.add(
                    {"kind": "file", "key": key, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
                )

            return run

        self._run([job(path, key) for path, key in files])

    def _download_files(
        self,
        files: list[tuple[str, Path]],
        meta: dict[str, tuple[int, str | None]] | None = None,
        journal: Journal | None = None,
    ) -> None:
        journal, meta = journal or Journal(None), meta or {}

        def job(key: str, path: Path, size: int | None, version: str | None) -> None:
            self._bucket.blob(key).download_to_filename(str(path))
            journal.add({"kind": "file", "key": key, "size": size, "etag": version})

        def reader(key: str, generation: int) -> Any:
            blob = self._bucket.blob(key)

            def read(start: int, end: int) -> list[bytes]:
                return [
                    blob.download_as_bytes(
                        start=start, end=end, if_generation_match=generation, checksum=None
                    )
                ]

            return read

        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="det-gcs") as pool:
            futures = []
            big = []
            for key, path in files:
                size, version = meta.get(key, (None, None))
                if size is not None and version and size >= RESUMABLE_THRESHOLD:
                    big.append(
                        RangedDownload(
                            journal, key, path, size, version, CHUNK, reader(key, int(version))
                        )
                    )
                    continue
                futures.append(pool.submit(job, key, path, size, version))
            run_transfers(pool, futures, big)

    def _list_meta(self, prefix: str) -> dict[str, tuple[int, str | None]]:
        # The generation identifies the object's content version (a rewrite gets a new one).
        return {
            b.name: (int(b.size or 0), str(b.generation) if b.generation else None)
            for b in self.client.list_blobs(self.bucket, prefix=prefix)
        }

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
