"""Checkpoint storage backends behind one interface: shared_fs, s3 (boto3), gcs.

A checkpoint is a directory of files named by its uuid. Backends write a `metadata.json` next to
the files so a checkpoint can be understood without the master.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

METADATA_FILE = "metadata.json"

Selector = Callable[[str], bool]


def list_resources(root: str | os.PathLike[str]) -> dict[str, int]:
    """`{relative path: size in bytes}` of every file under `root` (dirs end with '/', size 0)."""
    root = Path(root)
    out: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        for d in dirnames:
            out[f"{(rel_dir / d).as_posix()}/"] = 0
        for f in filenames:
            p = Path(dirpath) / f
            out[(rel_dir / f).as_posix()] = p.stat().st_size if not p.is_symlink() else 0
    return out


class StorageManager(abc.ABC):
    """Moves checkpoint directories between the worker's disk and the storage backend."""

    @abc.abstractmethod
    def upload(self, src: Path, uuid: str, paths: set[str] | None = None) -> None:
        """Copy the files of `src` (all, or only `paths`) into checkpoint `uuid`."""

    @abc.abstractmethod
    def download(self, uuid: str, dst: Path, selector: Selector | None = None) -> None:
        """Copy checkpoint `uuid` (files for which `selector(relpath)` holds) into `dst`."""

    @abc.abstractmethod
    def delete(self, uuid: str, globs: list[str] | None = None) -> None:
        """Remove the checkpoint (or only files matching `globs`)."""

    @abc.abstractmethod
    def store_path(self, uuid: str) -> contextlib.AbstractContextManager[Path]:
        """A directory to write checkpoint `uuid` into; stored when the context exits cleanly."""

    @abc.abstractmethod
    def restore_path(
        self, uuid: str, selector: Selector | None = None
    ) -> contextlib.AbstractContextManager[Path]:
        """A directory holding checkpoint `uuid`, valid inside the context."""

    @abc.abstractmethod
    def exists(self, uuid: str) -> bool: ...

    @abc.abstractmethod
    def read_metadata(self, uuid: str) -> dict[str, Any] | None:
        """The checkpoint's `metadata.json`, or None if the backend does not have it."""

    def location(self, uuid: str) -> str:
        """Human-readable place of the checkpoint (for logs)."""
        return uuid

    def list_files(self, uuid: str) -> dict[str, int]:
        """`{relative path: size}` of the stored files of checkpoint `uuid` ({} if none)."""
        if not self.exists(uuid):
            return {}
        with self.restore_path(uuid) as path:
            return {k: v for k, v in list_resources(path).items() if not k.endswith("/")}


_BACKENDS = {
    "shared_fs": "harness.storage.shared_fs",
    "s3": "harness.storage.s3",
    "gcs": "harness.storage.gcs",
}
# The pyproject.toml extra that brings a backend's client library (not installed by default).
_EXTRAS = {"s3": "aws", "gcs": "gcp"}


def build(config: Mapping[str, Any] | str | os.PathLike[str]) -> StorageManager:
    """A StorageManager for a `checkpoint_storage` config (a bare path means shared_fs there)."""
    if isinstance(config, (str, os.PathLike)):
        config = {"type": "shared_fs", "host_path": os.fspath(config)}
    kind = str(config.get("type", "shared_fs"))
    module_name = _BACKENDS.get(kind)
    if module_name is None:
        raise ValueError(
            f"unknown checkpoint_storage.type {kind!r} (expected one of {', '.join(_BACKENDS)})"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        extra = _EXTRAS.get(kind)
        how = (
            f"; pip install 'detlab[{extra}]' (in a container: an image with {e.name})"
            if extra
            else ""
        )
        raise NotImplementedError(
            f"checkpoint_storage.type {kind!r} is not available: {e}{how}"
        ) from e
    return module.from_config(dict(config))
