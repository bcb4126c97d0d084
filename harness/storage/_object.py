"""What S3 and GCS share: checkpoints as objects `<prefix>/<uuid>/<relative path>`.

Files are staged on local disk: `store_path` yields a temp dir and uploads it all when the
context exits cleanly (nothing when it raises), `restore_path` downloads into a temp dir. The
subclasses only move bytes (`_upload_files`, `_download_files`, `_list`, `_delete_keys`); they
transfer many files concurrently, so a checkpoint of many small files is not one round trip per
file in sequence.
"""

from __future__ import annotations

import abc
import contextlib
import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.storage import METADATA_FILE, Selector, StorageManager, list_resources
from harness.storage.journal import Journal, journal_path

# Files a worker transfers at once (the SDKs' own defaults are 10 for boto3, 8 for GCS).
DEFAULT_CONCURRENCY = 16


def check_uuid(uuid: str) -> str:
    if not uuid or "/" in uuid or uuid in (".", ".."):
        raise ValueError(f"invalid checkpoint uuid {uuid!r}")
    return uuid


class ObjectStorageManager(StorageManager):
    """A bucket (and optional prefix) of checkpoint objects."""

    scheme = "object"

    def __init__(self, bucket: str, prefix: str | None = None, temp_dir: str | None = None) -> None:
        if not bucket:
            raise ValueError("checkpoint_storage.bucket is required")
        self.bucket = bucket
        self.prefix = (prefix or "").strip("/")
        self.temp_dir = temp_dir

    # -- the bytes: one implementation per SDK ---------------------------------------------
    @abc.abstractmethod
    def _upload_files(self, files: list[tuple[Path, str]], journal: Journal | None = None) -> None:
        """Upload every `(local file, key)`, recording each finished one (and whatever lets a
        large file resume) in `journal`; raise if any fails."""

    @abc.abstractmethod
    def _download_files(
        self,
        files: list[tuple[str, Path]],
        meta: dict[str, tuple[int, str | None]] | None = None,
        journal: Journal | None = None,
    ) -> None:
        """Download every `(key, local file)` (`meta`: known `(size, etag)` of the objects),
        recording progress in `journal`; raise if any fails."""

    def _list_meta(self, prefix: str) -> dict[str, tuple[int, str | None]]:
        """`{key: (size, etag)}` under `prefix` (etag None when the store gives none)."""
        return {key: (size, None) for key, size in self._list(prefix).items()}

    @abc.abstractmethod
    def _list(self, prefix: str) -> dict[str, int]:
        """`{key: size}` of every object whose key starts with `prefix`."""

    @abc.abstractmethod
    def _delete_keys(self, keys: list[str]) -> None:
        """Delete objects (a key already gone counts as deleted)."""

    @abc.abstractmethod
    def _read(self, key: str) -> bytes | None:
        """One object's bytes, or None when it does not exist."""

    @abc.abstractmethod
    def _list_times(self, prefix: str) -> dict[str, datetime]:
        """`{key: last modified (aware)}` of every object whose key starts with `prefix`."""

    def unfinished_uploads(self) -> list[tuple[str, str, datetime]]:
        """`(key, upload id, begun)` of uploads under the prefix never completed (S3's multipart
        uploads; GCS has no listing of resumable sessions, which expire on their own in a
        week)."""
        return []

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Abort one of `unfinished_uploads()` (its stored parts are freed)."""

    # -- keys --------------------------------------------------------------------------------
    def _root(self, uuid: str) -> str:
        check_uuid(uuid)
        return f"{self.prefix}/{uuid}/" if self.prefix else f"{uuid}/"

    def location(self, uuid: str) -> str:
        return f"{self.scheme}://{self.bucket}/{self._root(uuid)}"

    def list_files(self, uuid: str) -> dict[str, int]:
        root = self._root(uuid)
        return {key[len(root) :]: size for key, size in self._list(root).items()}

    def exists(self, uuid: str) -> bool:
        return self._read(self._root(uuid) + METADATA_FILE) is not None

    def read_metadata(self, uuid: str) -> dict[str, Any] | None:
        raw = self._read(self._root(uuid) + METADATA_FILE)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    # -- StorageManager ------------------------------------------------------------------------
    def upload(self, src: Path, uuid: str, paths: set[str] | None = None) -> None:
        """Upload the files; an upload of the same directory killed before resumes: files its
        journal recorded finished (same size and mtime, object present) are skipped, and a
        large file's S3 multipart upload continues from its stored parts."""
        src = Path(src)
        root = self._root(uuid)
        rels = paths if paths is not None else set(list_resources(src))
        files = [
            (src / rel, root + rel)
            for rel in sorted(rels)
            if not rel.endswith("/") and (src / rel).is_file()
        ]
        if not files:
            return
        journal = Journal(journal_path(src, uuid, "upload"))
        done = journal.finished()
        stored = self._list(root) if done else {}
        todo = []
        for path, key in files:
            st = path.stat()
            r = done.get(key)
            if (
                r is not None
                and r.get("size") == st.st_size
                and r.get("mtime_ns") == st.st_mtime_ns
                and stored.get(key) == st.st_size
            ):
                continue
            todo.append((path, key))
        try:
            if todo:
                self._upload_files(todo, journal)
        finally:
            journal.close()
        journal.finish()

    def download(self, uuid: str, dst: Path, selector: Selector | None = None) -> None:
        """Download the files; a download into the same directory killed before resumes: files
        its journal recorded finished (same size and etag, present on disk) are skipped, and a
        large S3 object continues from its downloaded chunks."""
        dst = Path(dst)
        root = self._root(uuid)
        meta = self._list_meta(root)
        if not meta:
            raise FileNotFoundError(f"checkpoint {uuid} not found at {self.location(uuid)}")
        dst.mkdir(parents=True, exist_ok=True)
        journal = Journal(journal_path(dst, uuid, "download"))
        done = journal.finished()
        files = []
        for key in sorted(meta):
            rel = key[len(root) :]
            if rel.endswith("/") or (selector is not None and not selector(rel)):
                continue
            target = dst / rel
            size, etag = meta[key]
            r = done.get(key)
            if (
                etag is not None
                and r is not None
                and (r.get("size"), r.get("etag")) == (size, etag)
                and target.is_file()
                and target.stat().st_size == size
            ):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            files.append((key, target))
        try:
            if files:
                self._download_files(files, meta, journal)
        finally:
            journal.close()
        journal.finish()

    def delete(self, uuid: str, globs: list[str] | None = None) -> None:
        root = self._root(uuid)
        keys = list(self._list(root))
        if globs is not None:
            keys = [k for k in keys if any(fnmatch.fnmatch(k[len(root) :], g) for g in globs)]
        if keys:
            self._delete_keys(keys)

    # -- partial uploads (the master's orphan sweep) -----------------------------------------
    def stale_directories(self, before: datetime) -> dict[str, list[str]]:
        """`{name: keys}` of each `<prefix>/<name>/` whose newest object is older than `before`
        (a killed upload's leftovers look like this; the caller decides which names are
        orphans)."""
        root = f"{self.prefix}/" if self.prefix else ""
        keys: dict[str, list[str]] = {}
        newest: dict[str, datetime] = {}
        for key, when in self._list_times(root).items():
            name, sep, _rest = key[len(root) :].partition("/")
            if not sep or not name:
                continue  # an object directly under the prefix: not a checkpoint's
            keys.setdefault(name, []).append(key)
            if name not in newest or when > newest[name]:
                newest[name] = when
        return {name: ks for name, ks in keys.items() if newest[name] < before}

    def delete_keys(self, keys: list[str]) -> None:
        if keys:
            self._delete_keys(keys)

    @contextlib.contextmanager
    def store_path(self, uuid: str) -> Iterator[Path]:
        tmp = Path(tempfile.mkdtemp(prefix=f"det-ckpt-{uuid[:8]}-", dir=self.temp_dir))
        try:
            yield tmp
            self.upload(tmp, uuid)  # only a cleanly written checkpoint leaves this machine
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            # A temp directory is never uploaded again: its journal (after a failure) is moot.
            journal_path(tmp, uuid, "upload").unlink(missing_ok=True)

    @contextlib.contextmanager
    def restore_path(self, uuid: str, selector: Selector | None = None) -> Iterator[Path]:
        tmp = Path(tempfile.mkdtemp(prefix=f"det-restore-{uuid[:8]}-", dir=self.temp_dir))
        try:
            self.download(uuid, tmp, selector)
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            journal_path(tmp, uuid, "download").unlink(missing_ok=True)


def env_or(config: dict[str, Any], key: str, env: str) -> str | None:
    value = config.get(key)
    return str(value) if value else os.environ.get(env) or None
