"""S3 transfers that survive a kill of the process doing them.

Uploads: files under the multipart threshold go through boto3's transfer manager (many at once)
and are journaled as each finishes; a larger file is a multipart upload run here, its upload id
journaled before the first part, so a restarted upload asks S3 which parts it already holds
(`list_parts`) and sends only the others. An upload that fails is left unfinished on purpose (a
restart resumes it; the master's orphan sweep aborts it if nobody does).

Downloads: small objects through the transfer manager (it writes a temp file and renames, so a
killed download never leaves a half file under the real name, though it does leave that temp
file, `<file>.<8 hex digits>`, which the next download of the same file removes); a large object
is fetched in parallel ranged GETs (`If-Match` its etag) into `<file>.det-part`, each chunk
journaled once written, then renamed: a restart fetches only the missing chunks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boto3.s3.transfer import create_transfer_manager
from botocore.exceptions import ClientError
from s3transfer.subscribers import BaseSubscriber
from s3transfer.utils import set_default_checksum_algorithm

from harness.storage.journal import Journal
from harness.storage.ranged import RangedDownload, run_transfers

if TYPE_CHECKING:
    from harness.storage.s3 import S3StorageManager


class _Record(BaseSubscriber):
    """Journals a file once the transfer manager finished it (and only if it succeeded)."""

    def __init__(self, journal: Journal, record: dict[str, Any], size: int | None = None) -> None:
        self.journal, self.record, self.size = journal, record, size

    def on_queued(self, future: Any, **kwargs: Any) -> None:
        if self.size is not None:  # known from the listing: no HeadObject per file
            future.meta.provide_transfer_size(self.size)

    def on_done(self, future: Any, **kwargs: Any) -> None:
        try:
            future.result()
        except Exception:  # noqa: BLE001 - a failed file is simply not journaled
            return
        self.journal.add(self.record)


def _error_code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


_CHECKSUMS = (
    "ChecksumCRC32",
    "ChecksumCRC32C",
    "ChecksumCRC64NVME",
    "ChecksumSHA1",
    "ChecksumSHA256",
)


def _part_fields(reply: dict[str, Any]) -> dict[str, str]:
    """A part's ETag and checksum (from UploadPart's reply or a ListParts entry)."""
    out = {"ETag": str(reply["ETag"])}
    for name in _CHECKSUMS:
        if reply.get(name):
            out[name] = str(reply[name])
    return out


def _part_sizes(size: int, chunk: int) -> list[int]:
    count = max(1, math.ceil(size / chunk))
    return [min(chunk, size - i * chunk) for i in range(count)]


class _Multipart:
    """One large file's multipart upload, new or resumed from the journal."""

    def __init__(
        self, mgr: S3StorageManager, journal: Journal, path: Path, key: str, chunk: int
    ) -> None:
        st = path.stat()
        self.mgr, self.journal, self.path, self.key, self.chunk = mgr, journal, path, key, chunk
        self.identity = {"key": key, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        self.sizes = _part_sizes(st.st_size, chunk)
        # part number -> what CompleteMultipartUpload needs of it (ETag, and any checksum
        # botocore computed for it: S3 wants those back when the upload has an algorithm).
        self.parts: dict[int, dict[str, str]] = {}
        self.upload_id = self._resume() or self._create()
        self.futures: dict[int, Future[dict[str, str]]] = {}

    def _resume(self) -> str | None:
        want = {**self.identity, "chunk": self.chunk}
        recs = [
            r
            for r in self.journal.records("multipart")
            if all(r.get(k) == v for k, v in want.items())
        ]
        if not recs:
            return None
        upload_id = str(recs[-1]["upload_id"])
        client = self.mgr.client
        try:
            pages = client.get_paginator("list_parts").paginate(
                Bucket=self.mgr.bucket, Key=self.key, UploadId=upload_id
            )
            for page in pages:
                for p in page.get("Parts", []):
                    n = int(p["PartNumber"])
                    if 1 <= n <= len(self.sizes) and int(p["Size"]) == self.sizes[n - 1]:
                        self.parts[n] = _part_fields(p)
        except ClientError as e:
            if _error_code(e) in ("NoSuchUpload", "404", "NotFound"):
                self.parts.clear()
                return None  # aborted (the orphan sweep) or completed meanwhile: start over
            raise
        return upload_id

    def _create(self) -> str:
        # Name the parts' checksum algorithm up front, as boto3's transfer manager does under
        # botocore's default `when_supported`: an upload created without one gets a whole-object
        # CRC64NVME computed by the server when it completes (moto's server spends ~10 s of
        # Python on a 1 GiB file; 0.5x boto3's upload_file), instead of a CRC32 per part.
        extra: dict[str, Any] = {}
        if self.mgr.client.meta.config.request_checksum_calculation == "when_supported":
            set_default_checksum_algorithm(extra)
        reply = self.mgr.client.create_multipart_upload(
            Bucket=self.mgr.bucket, Key=self.key, **extra
        )
        upload_id = str(reply["UploadId"])
        self.journal.add(
            {"kind": "multipart", **self.identity, "chunk": self.chunk, "upload_id": upload_id}
        )
        return upload_id

    def _put(self, n: int) -> dict[str, str]:
        with open(self.path, "rb") as f:
            f.seek((n - 1) * self.chunk)
            data = f.read(self.sizes[n - 1])
        reply = self.mgr.client.upload_part(
            Bucket=self.mgr.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=n, Body=data
        )
        return _part_fields(reply)

    def start(self, pool: ThreadPoolExecutor) -> None:
        for n in range(1, len(self.sizes) + 1):
            if n not in self.parts:
                self.futures[n] = pool.submit(self._put, n)

    def finish(self) -> None:
        for n, f in self.futures.items():
            self.parts[n] = f.result()
        self.mgr.client.complete_multipart_upload(
            Bucket=self.mgr.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={
                "Parts": [{"PartNumber": n, **self.parts[n]} for n in sorted(self.parts)]
            },
        )
        self.journal.add({"kind": "file", **self.identity})


def upload_files(mgr: S3StorageManager, files: list[tuple[Path, str]], journal: Journal) -> None:
    threshold = mgr.transfer_config.multipart_threshold
    chunk = mgr.transfer_config.multipart_chunksize
    with (
        create_transfer_manager(mgr.client, mgr.transfer_config) as tm,
        ThreadPoolExecutor(mgr.concurrency, thread_name_prefix="det-s3-part") as pool,
    ):
        futures = []
        big = []
        for path, key in files:
            st = path.stat()
            if st.st_size >= threshold:
                big.append(_Multipart(mgr, journal, path, key, chunk))
                continue
            record = {"kind": "file", "key": key, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
            futures.append(
                tm.upload(str(path), mgr.bucket, key, subscribers=[_Record(journal, record)])
            )
        run_transfers(pool, futures, big)


def _range_reader(
    mgr: S3StorageManager, key: str, etag: str
) -> Callable[[int, int], Iterable[bytes]]:
    def read(start: int, end: int) -> Iterable[bytes]:
        reply = mgr.client.get_object(
            Bucket=mgr.bucket, Key=key, Range=f"bytes={start}-{end}", IfMatch=etag
        )
        return reply["Body"].iter_chunks(1024 * 1024)

    return read


def _sweep_temps(target: Path, keep: set[str]) -> None:
    """Remove the transfer manager's temp files of `target` left by a killed download (it names
    them `<file>.` plus 8 hex digits), sparing any that is itself a file of the checkpoint."""
    pattern = re.compile(re.escape(target.name) + r"\.[0-9a-fA-F]{8}")
    try:
        siblings = list(target.parent.iterdir())
    except OSError:
        return
    for p in siblings:
        if p.name not in keep and pattern.fullmatch(p.name) and p.is_file():
            p.unlink(missing_ok=True)


def download_files(
    mgr: S3StorageManager,
    files: list[tuple[str, Path]],
    meta: dict[str, tuple[int, str | None]],
    journal: Journal,
) -> None:
    threshold = mgr.transfer_config.multipart_threshold
    keep = {k.rsplit("/", 1)[-1] for k in meta}
    with (
        create_transfer_manager(mgr.client, mgr.transfer_config) as tm,
        ThreadPoolExecutor(mgr.concurrency, thread_name_prefix="det-s3-range") as pool,
    ):
        futures = []
        big = []
        for key, target in files:
            size, etag = meta.get(key, (None, None))
            if size is not None and etag and size >= threshold:
                big.append(
                    RangedDownload(
                        journal,
                        key,
                        target,
                        size,
                        etag,
                        mgr.transfer_config.multipart_chunksize,
                        _range_reader(mgr, key, etag),
                    )
                )
                continue
            record = {"kind": "file", "key": key, "size": size, "etag": etag}
            _sweep_temps(target, keep)
            futures.append(
                tm.download(
                    mgr.bucket, key, str(target), subscribers=[_Record(journal, record, size)]
                )
            )
        run_transfers(pool, futures, big)
