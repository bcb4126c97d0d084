"""Model definitions: downloaded once per experiment, cached, and extracted safely.

Every trial of an experiment runs the same model directory, so the agent fetches the tarball
once per (experiment, sha256) and keeps a few in `<work-dir>/cache/`. The cache directory is the
agent's own (0700, never a trial's), and a cached file is checked against its sha256 on every
use: one that does not match is logged, removed and fetched again, never run. Without a sha256
to check against nothing is cached. Extraction uses tarfile's "data" filter: a tarball is user
input and must not write outside the trial's directory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tarfile
import threading
from pathlib import Path
from typing import Protocol

from detlab.protocol import StartSpec

log = logging.getLogger(__name__)


class ModelDefError(Exception):
    """The model definition could not be fetched, verified or extracted."""


class Downloader(Protocol):
    def download_model_def(self, url: str) -> bytes: ...


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:80] or "x"


class ModelDefCache:
    """Fetches model definitions through `client`, at most once per (experiment, sha256)."""

    def __init__(self, cache_dir: Path, client: Downloader, keep: int = 16) -> None:
        self.cache_dir = Path(cache_dir)
        self.client = client
        self.keep = keep
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}

    def _key_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(name, threading.Lock())

    def fetch(self, spec: StartSpec) -> Path | None:
        """The local path of the spec's model definition, or None when it has none."""
        url = spec.model_def_url
        if not url:
            return None
        sha = (spec.model_def_sha256 or "").lower()
        exp = _safe_name(str(spec.experiment_id))
        name = f"exp-{exp}-{_safe_name(sha) if sha else 'nosha'}.tar.gz"
        path = self.cache_dir / name
        with self._key_lock(name):
            if sha and self._verified(path, sha):
                os.utime(path)  # most recently used: keep it when pruning
                return path
            data = self.client.download_model_def(url)
            if sha and hashlib.sha256(data).hexdigest() != sha:
                raise ModelDefError(
                    f"model definition from {url} does not match its sha256 "
                    f"(expected {sha}, got {hashlib.sha256(data).hexdigest()})"
                )
            self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.cache_dir.chmod(0o700)  # also when an older agent made it
            tmp = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            log.info("cached model definition %s (%d bytes)", name, len(data))
        self._prune()
        return path

    @staticmethod
    def _verified(path: Path, sha: str) -> bool:
        """Whether the cached `path` exists and still hashes to `sha` (a mismatch is removed)."""
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        except FileNotFoundError:
            return False
        except OSError as e:
            log.warning("cannot read the cached model definition %s (%s): fetching again", path, e)
            return False
        if digest.hexdigest() == sha:
            return True
        log.warning(
            "the cached model definition %s does not match its sha256 (expected %s, got %s): "
            "someone changed it; removing it and fetching it again",
            path,
            sha,
            digest.hexdigest(),
        )
        path.unlink(missing_ok=True)
        return False

    def _prune(self) -> None:
        try:
            files = sorted(
                (p for p in self.cache_dir.glob("exp-*.tar.gz") if p.is_file()),
                key=lambda p: p.stat().st_mtime,
                reverse=True,
            )
            for old in files[self.keep :]:
                old.unlink(missing_ok=True)
        except OSError as e:
            log.debug("cannot prune the model definition cache: %s", e)


def extract_model_def(tar_path: Path, dest: Path) -> None:
    """Extract a model-definition .tar.gz into `dest`, refusing anything that escapes it."""
    try:
        with tarfile.open(tar_path, "r:*") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:
                extract_checked(tar, dest)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ModelDefError(f"cannot extract the model definition: {e}") from e


def extract_checked(tar: tarfile.TarFile, dest: Path) -> None:
    """For a Python without tarfile's "data" filter (before 3.11.4, 3.10.12): the launcher of
    a Slurm job in a container runs on the image's Python (Debian 12's 3.11.2, for one).
    Stricter than the filter: only plain files and directories, every one inside `dest`,
    without special mode bits, owned by whoever extracts."""
    root = os.path.realpath(dest)
    members = tar.getmembers()
    for m in members:
        if not (m.isfile() or m.isdir()):
            raise ModelDefError(f"the model definition holds {m.name!r}, not a file or directory")
        target = os.path.realpath(os.path.join(root, m.name))
        if os.path.isabs(m.name) or os.path.commonpath([root, target]) != root:
            raise ModelDefError(f"the model definition's {m.name!r} would land outside it")
        m.mode &= 0o755
        m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
    tar.extractall(dest, members=members)  # noqa: S202 (every member checked above)
