"""TensorBoard files of a trial: written locally, uploaded to checkpoint storage.

Layout (Determined's, without its cluster id: one detlab master per storage, and a uuid-named
top directory would look like a checkpoint to the orphan sweeps): the events of trial T of
experiment E live under `<checkpoint storage>/tensorboard/experiment/E/trial/T/`, i.e. the
storage "directory" `tensorboard` (STORAGE_DIR) holding `experiment/E/trial/T/<files>`.

Each worker writes into its own local directory (`get_tensorboard_path()`); `sync()` uploads the
files that changed since the last sync (size or mtime), copied first into a staging directory so
a writer appending meanwhile never tears an upload, and renamed by a mangler (workers other than
the chief get `.rank<N>` appended, so their files never overwrite the chief's).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.storage import StorageManager
from harness.storage.journal import journal_path

logger = logging.getLogger("harness.core.tensorboard")

STORAGE_DIR = "tensorboard"
# Core API AUTO mode uploads at most this often (seconds); close() always uploads the rest.
AUTO_SYNC_INTERVAL_S = float(os.environ.get("DET_TENSORBOARD_SYNC_S", "30"))

Selector = Callable[[Path], bool]
Mangler = Callable[[Path, int], Path]


def sync_path(experiment_id: int, trial_id: int) -> str:
    """Where a trial's files go inside STORAGE_DIR (pure)."""
    return f"experiment/{int(experiment_id)}/trial/{int(trial_id)}"


def default_mangler(path: Path, rank: int) -> Path:
    """The chief's names unchanged; another worker's get `.rank<N>` so names never collide."""
    return path if rank == 0 else path.with_name(f"{path.name}.rank{rank}")


def metric_tag(group: str, name: str) -> str:
    """The TensorBoard tag of a reported metric, as Determined names them: `Determined/<name>`
    for training, `Determined/val_<name>` for validation (unless it already starts with val)."""
    if group == "validation" and not name.startswith("val"):
        name = f"val_{name}"
    return f"Determined/{name}"


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The metrics TensorBoard can plot: real numbers (bools, strings, lists are left out)."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            continue
        if hasattr(v, "item") and callable(v.item):  # numpy / torch scalars
            try:
                v = v.item()
            except (TypeError, ValueError, RuntimeError):
                continue
        if isinstance(v, (int, float)):
            out[str(k)] = float(v)
    return out


def changed(
    current: Mapping[str, tuple[int, int]], seen: Mapping[str, tuple[int, int]]
) -> list[str]:
    """Relative paths whose (size, mtime_ns) differ from the last upload (pure)."""
    return sorted(rel for rel, stamp in current.items() if seen.get(rel) != stamp)


def _stamps(root: Path) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                st = p.stat()
            except OSError:
                continue  # removed meanwhile
            out[p.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


class TensorboardManager:
    """One worker's TensorBoard directory and its uploads (storage None: nothing is uploaded,
    as off a cluster, where no experiment or trial exists)."""

    def __init__(
        self,
        local_root: Path,
        storage: Callable[[], StorageManager] | None,
        experiment_id: int | None,
        trial_id: int | None,
        rank: int = 0,
    ) -> None:
        self.local_root = Path(local_root)
        self._storage = storage
        self.rank = rank
        self.sync_path = (
            sync_path(experiment_id, trial_id)
            if experiment_id is not None and trial_id is not None
            else "local"
        )
        self._seen: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self.last_sync = float("-inf")  # the first AUTO report uploads at once
        self._bg: threading.Thread | None = None
        self._wake = threading.Event()
        self._closing = False

    @property
    def uploads(self) -> bool:
        """Whether `sync()` sends files anywhere (off a cluster it does not)."""
        return self._storage is not None

    @property
    def path(self) -> Path:
        """The directory to write TensorBoard files into (made on first use)."""
        p = self.local_root / self.sync_path
        p.mkdir(parents=True, exist_ok=True)
        return p

    def sync(self, selector: Selector | None = None, mangler: Mangler | None = None) -> int:
        """Upload the files changed since the last sync; returns how many were uploaded."""
        if self._storage is None:
            return 0
        mangle = mangler or default_mangler
        with self._lock:
            base = self.path
            todo = [
                rel
                for rel in changed(_stamps(base), self._seen)
                if selector is None or selector(base / rel)
            ]
            self.last_sync = time.monotonic()
            if not todo:
                return 0
            staging = Path(tempfile.mkdtemp(prefix="det-tb-", dir=self.local_root))
            try:
                uploaded: dict[str, tuple[int, int]] = {}
                paths: set[str] = set()
                for rel in todo:
                    src = base / rel
                    try:
                        st = src.stat()
                        name = mangle(Path(rel), self.rank).as_posix().lstrip("/")
                        dst = staging / self.sync_path / name
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(src, dst)
                    except OSError as e:  # a file removed while we looked: skip it
                        logger.debug("not uploading %s: %s", src, e)
                        continue
                    paths.add(f"{self.sync_path}/{name}")
                    uploaded[rel] = (st.st_size, st.st_mtime_ns)
                if paths:
                    self._storage().upload(staging, STORAGE_DIR, paths)
                self._seen.update(uploaded)
                return len(paths)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
                # A staging directory is never uploaded again: a failed upload's journal is moot.
                journal_path(staging, STORAGE_DIR, "upload").unlink(missing_ok=True)

    def sync_in_background(self) -> None:
        """Ask for a sync on this manager's own thread (requests while one runs coalesce): the
        Core API's reports do no network I/O on the training thread."""
        self._wake.set()
        if self._bg is None:
            self._bg = threading.Thread(target=self._loop, name="tensorboard-sync", daemon=True)
            self._bg.start()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 - any backend error; the next sync retries
                logger.warning("TensorBoard files could not be uploaded: %s", e)

    def stop_background(self, timeout: float | None = None) -> None:
        """Let a running background sync finish and end the thread."""
        if self._bg is not None:
            self._closing = True
            self._wake.set()
            self._bg.join(timeout)
            self._bg = None


class MetricWriter:
    """Reported metrics as TensorBoard scalars, with TensorBoard's own writer (no TensorFlow,
    no torch). Without the `tensorboard` package it writes nothing and says so once."""

    def __init__(self, logdir: Path) -> None:
        self._logdir = logdir
        self._writer: Any = None
        self._missing = False

    def _get(self) -> Any:
        if self._writer is None and not self._missing:
            try:
                from tensorboard.summary import Writer
            except ImportError:
                self._missing = True
                logger.warning(
                    "the tensorboard package is not installed: metrics are not written as "
                    "TensorBoard events (pip install 'detlab[torch]' or tensorboard)"
                )
                return None
            self._writer = Writer(str(self._logdir))
        return self._writer

    def write(self, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        writer = self._get()
        if writer is None:
            return
        for name, value in scalars(metrics).items():
            writer.add_scalar(metric_tag(group, name), value, step=steps_completed)

    def flush(self) -> None:
        """Write buffered events to the file (before each upload)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def local_root(allocation_id: str | None, rank: int) -> Path:
    """This worker's local TensorBoard root (Determined: /tmp/tensorboard-<allocation>-<rank>);
    DET_TENSORBOARD_DIR overrides the parent directory."""
    parent = os.environ.get("DET_TENSORBOARD_DIR") or tempfile.gettempdir()
    name = f"tensorboard-{allocation_id or f'local-{os.getpid()}'}-{rank}"
    return Path(parent) / name
