"""One in-memory tail per followed trial, shared by all of its log followers.

Following a trial's log used to cost every follower its own queries on every wake-up (the trial,
the new lines, the trial again). Here the followers of a trial share a `TrialTail`: on a wake-up
the first follower to arrive reads the new lines in one indexed query (`id > last seen`) under
the tail's lock and the others are served from memory, so the database work per new batch of
lines is one query per trial, whatever the number of followers. The trial's state (for "the
trial has ended") is cached the same way, re-read when the trial's hub key moves or every few
seconds (not every state change notifies it).

`TrialTail` itself is pure bookkeeping (no I/O), tested alone; `LogTails` (in `MasterState`)
holds the tails of recently followed trials.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TAIL_LINES = 2_000  # lines kept per trial; a follower further behind catches up from the DB
TAIL_BYTES = 4 * 1024 * 1024  # and at most this much text (a line may be up to 64 KiB)
MAX_TRIALS = 256  # tails kept (least recently followed dropped first)


@dataclass
class TrialTail:
    """The newest lines of one trial's log: every line with `covered_from < seq <= last_seq`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    lines: list[dict[str, Any]] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    covered_from: int = -1
    last_seq: int = -1
    loaded: bool = False
    log_version: int = -1  # hub version of the trial's logs key at the last read
    refreshed_at: float = 0.0  # monotonic time of the last read of new lines
    exists: bool = True
    state: str | None = None
    ended_at: datetime | None = None
    trial_version: int = -1
    state_at: float = 0.0
    capacity: int = TAIL_LINES
    max_bytes: int = TAIL_BYTES
    text_bytes: int = 0

    def start_at(self, seq: int) -> None:
        """Begin covering the log after `seq` (its newest line when the tail is made)."""
        self.covered_from = self.last_seq = seq
        self.loaded = True

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Append new lines (ascending `seq`, each > `last_seq`); drop the oldest past the
        line or byte capacity."""
        for r in rows:
            if r["seq"] <= self.last_seq:
                continue
            self.lines.append(r)
            self.seqs.append(r["seq"])
            self.text_bytes += len(r.get("line") or "")
            self.last_seq = r["seq"]
        drop = 0
        while drop < len(self.lines) and (
            len(self.lines) - drop > self.capacity or self.text_bytes > self.max_bytes
        ):
            self.text_bytes -= len(self.lines[drop].get("line") or "")
            drop += 1
        if drop:
            self.covered_from = self.seqs[drop - 1]
            del self.lines[:drop]
            del self.seqs[:drop]

    def after(self, seq: int, limit: int) -> list[dict[str, Any]] | None:
        """Lines with `seq` greater than `seq` (at most `limit`), or None when older lines than
        the tail holds are asked for (the caller reads those from the database)."""
        if seq < self.covered_from:
            return None
        i = bisect.bisect_right(self.seqs, seq)
        return self.lines[i : i + limit]


class LogTails:
    """The tails of recently followed trials (per master: `MasterState.logs.tails`)."""

    def __init__(self, max_trials: int = MAX_TRIALS) -> None:
        self._lock = threading.Lock()
        self._tails: OrderedDict[int, TrialTail] = OrderedDict()
        self.max_trials = max_trials

    def get(self, trial_id: int) -> TrialTail:
        with self._lock:
            tail = self._tails.get(trial_id)
            if tail is None:
                tail = self._tails[trial_id] = TrialTail()
                while len(self._tails) > self.max_trials:
                    self._tails.popitem(last=False)
            else:
                self._tails.move_to_end(trial_id)
            return tail

    def __len__(self) -> int:
        return len(self._tails)
