"""A transfer's journal: what finished, so a killed upload or download restarts where it was.

An append-only file of JSON lines kept next to the source directory (uploads) or the target
directory (downloads), never inside it (it must not become part of the checkpoint):
`.<dir name>.<uuid>.det-upload` / `.det-download`. Each finished file, each started S3
multipart upload (its upload id) and each downloaded chunk of a large file is one line; a line
torn by a kill is ignored. The journal is removed once the whole transfer succeeded. When the
directory next to it is not writable the transfer simply is not resumable.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("detlab.storage")


def journal_path(directory: Path, uuid: str, kind: str) -> Path:
    directory = Path(directory).resolve()
    return directory.parent / f".{directory.name}.{uuid}.det-{kind}"


class Journal:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        self._fd: int | None = None
        if path is None:
            return
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue  # torn by a kill
                    if isinstance(rec, dict):
                        self._records.append(rec)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("transfer journal %s unreadable (%s): starting over", path, e)
            self._records = []

    def records(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self._records if r.get("kind") == kind]

    def finished(self) -> dict[str, dict[str, Any]]:
        """`{key: record}` of the files recorded finished (the last record of a key wins)."""
        return {r["key"]: r for r in self.records("file") if isinstance(r.get("key"), str)}

    def add(self, record: dict[str, Any]) -> None:
        """Append one record (a whole line in one write: a kill leaves at most a torn line)."""
        if self.path is None:
            return
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._lock:
            self._records.append(record)
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                os.write(self._fd, data)
            except OSError as e:
                log.warning("transfer journal %s not writable (%s): not resumable", self.path, e)
                self.path = None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def finish(self) -> None:
        """The transfer succeeded: nothing to resume."""
        self.close()
        if self.path is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
