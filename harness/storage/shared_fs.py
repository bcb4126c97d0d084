"""Checkpoints on a filesystem every agent mounts at the same path: `<base>/<uuid>/`.

`base` is `host_path`, or `host_path/storage_path` when `storage_path` is set (the config schema
keeps `storage_path` inside `host_path` and stores it relative; an absolute one from an older
master still wins here). Store and restore work in place: no copies.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.storage import METADATA_FILE, Selector, StorageManager


class SharedFSStorageManager(StorageManager):
    def __init__(self, base: str | os.PathLike[str]) -> None:
        self.base = Path(base).expanduser().absolute()

    def path(self, uuid: str) -> Path:
        if not uuid or "/" in uuid or uuid in (".", ".."):
            raise ValueError(f"invalid checkpoint uuid {uuid!r}")
        return self.base / uuid

    def location(self, uuid: str) -> str:
        return str(self.path(uuid))

    def exists(self, uuid: str) -> bool:
        return self.path(uuid).is_dir()

    def upload(self, src: Path, uuid: str, paths: set[str] | None = None) -> None:
        dst = self.path(uuid)
        src = Path(src).absolute()
        if src == dst:
            return
        dst.mkdir(parents=True, exist_ok=True)
        if paths is None:
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
            return
        for rel in paths:
            s = src / rel
            if rel.endswith("/") or s.is_dir():
                (dst / rel).mkdir(parents=True, exist_ok=True)
                continue
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, dst / rel, follow_symlinks=False)

    def download(self, uuid: str, dst: Path, selector: Selector | None = None) -> None:
        src = self.path(uuid)
        if not src.is_dir():
            raise FileNotFoundError(f"checkpoint {uuid} not found at {src}")
        dst = Path(dst)
        if selector is None:
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
            return
        for dirpath, _dirs, files in os.walk(src):
            for f in files:
                rel = (Path(dirpath) / f).relative_to(src).as_posix()
                if selector(rel):
                    (dst / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src / rel, dst / rel, follow_symlinks=False)

    def delete(self, uuid: str, globs: list[str] | None = None) -> None:
        root = self.path(uuid)
        if globs is None:
            shutil.rmtree(root, ignore_errors=True)
            return
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                rel = (Path(dirpath) / f).relative_to(root).as_posix()
                if any(fnmatch.fnmatch(rel, g) for g in globs):
                    (root / rel).unlink(missing_ok=True)

    @contextlib.contextmanager
    def store_path(self, uuid: str) -> Iterator[Path]:
        path = self.path(uuid)
        path.mkdir(parents=True, exist_ok=True)
        try:
            yield path
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)  # a half-written checkpoint is no checkpoint
            raise

    @contextlib.contextmanager
    def restore_path(self, uuid: str, selector: Selector | None = None) -> Iterator[Path]:
        path = self.path(uuid)
        if not path.is_dir():
            raise FileNotFoundError(f"checkpoint {uuid} not found at {path}")
        yield path

    def read_metadata(self, uuid: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.path(uuid) / METADATA_FILE).read_text())
        except (OSError, ValueError):
            return None


def from_config(config: dict[str, Any]) -> SharedFSStorageManager:
    host_path = config.get("host_path")
    if not host_path:
        raise ValueError("checkpoint_storage.host_path is required for type shared_fs")
    storage_path = config.get("storage_path")
    base = Path(host_path) / storage_path if storage_path else Path(host_path)
    return SharedFSStorageManager(base)
