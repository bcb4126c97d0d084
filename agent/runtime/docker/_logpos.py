"""Log positions in a container's log, and what a re-attached stream must not send twice.

Pure data structures: the engine's timestamps, the position of the last delivered line, the
assembly of frames into lines, and the lines the master already stored (`ResentLines`).
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

# -- log positions -----------------------------------------------------------------------------


def parse_ts(text: str) -> tuple[int, str]:
    """An engine timestamp (RFC 3339, nanoseconds) -> (ns since the epoch, ISO with µs + Z)."""
    head, _, frac = text.rstrip("Z").partition(".")
    frac, tz = _split_tz(frac)
    base = datetime.fromisoformat(head + (tz or "+00:00"))
    digits = (frac + "000000000")[:9]
    ns = int(base.timestamp()) * 1_000_000_000 + int(digits)
    iso = base.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{digits[:6]}Z"
    return ns, iso


def _split_tz(frac: str) -> tuple[str, str]:
    for sign in ("+", "-"):
        if sign in frac:
            a, _, b = frac.partition(sign)
            return a, sign + b
    return frac, ""


@dataclass
class LogPos:
    """A position in a container's log: the engine timestamp of a frame, and how many frames
    with exactly that timestamp are at or before it (timestamps can repeat)."""

    ns: int = 0
    count: int = 0

    def since_param(self) -> str | None:
        if self.ns <= 0:
            return None
        ns = max(0, self.ns - 1_000_000)  # 1 ms early: the filter below is exact
        return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"

    def to_json(self) -> dict[str, int]:
        return {"ns": self.ns, "count": self.count}


class FrameFilter:
    """Skips the frames at or before a position, and tracks the position of the frames after."""

    def __init__(self, after: LogPos) -> None:
        self.after = LogPos(after.ns, after.count)
        self.cur = LogPos(after.ns, after.count)
        self._seen_at_after = 0

    def accept(self, ns: int) -> bool:
        """Whether the frame with this timestamp is new; updates `cur` if so."""
        if ns < self.after.ns:
            return False
        if ns == self.after.ns:
            self._seen_at_after += 1
            if self._seen_at_after <= self.after.count:
                return False
        # The position only moves forward: stdout and stderr are stamped independently, so a
        # frame can carry a timestamp a hair older than the one before it.
        if ns == self.cur.ns:
            self.cur = LogPos(ns, self.cur.count + 1)
        elif ns > self.cur.ns:
            self.cur = LogPos(ns, 1)
        return True

    def resumed(self) -> FrameFilter:
        """The filter for a new request of the same log (a reconnect, the final re-read): it
        skips every frame at or before the position reached."""
        return FrameFilter(self.cur)


class LineAssembler:
    """Frames (one log entry each; the engine splits long lines into partial entries without a
    newline) -> whole lines, each with the position of its last frame."""

    def __init__(self) -> None:
        self._parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._first_iso: dict[str, str] = {}

    def feed(self, stream: str, iso: str, text: str) -> str | None:
        parts = self._parts[stream]
        if not parts:
            self._first_iso[stream] = iso
        parts.append(text)
        if not text.endswith("\n"):
            return None
        line = "".join(parts).rstrip("\r\n")
        parts.clear()
        return line

    def first_iso(self, stream: str) -> str:
        return self._first_iso.get(stream, "")

    def rest(self) -> list[tuple[str, str, str]]:
        """Unterminated lines at the end of the log: (stream, iso, line)."""
        out = []
        for stream, parts in self._parts.items():
            if parts:
                out.append((stream, self._first_iso[stream], "".join(parts).rstrip("\r\n")))
                parts.clear()
        return out


def iso_us(iso: str) -> int:
    """Microseconds since the epoch of an ISO 8601 timestamp (the master keeps microseconds)."""
    dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _MICROSECOND


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class ResentLines:
    """After a re-attach: drops the re-read lines that the master stored already.

    The saved delivery position can lag the master by the lines whose delivery the agent had not
    recorded yet when it died (at most the batch in flight). The master's newest lines of the
    allocation, from the delivered position's microsecond on, are matched in order against the
    re-read lines: a re-read line found among them (after the previous match) is dropped; the
    first one not found ends the overlap, and every line from there on is new.
    """

    def __init__(self, stored: list[tuple[str, int, str]], after_us: int) -> None:
        self._stored = [entry for entry in stored if entry[1] >= after_us]
        self._next = 0
        self.done = not self._stored

    def drop(self, stream: str, us: int, line: str) -> bool:
        if self.done:
            return False
        key = (stream, us, line)
        for i in range(self._next, len(self._stored)):
            if self._stored[i] == key:
                self._next = i + 1
                self.done = self._next >= len(self._stored)
                return True
        self.done = True
        return False


class _LogState:
    """Per allocation: lines added to the shipper but not yet delivered, the delivered position,
    and the file it is kept in."""

    def __init__(self, path: Path, container_id: str, delivered: LogPos) -> None:
        self.path = path
        self.container_id = container_id
        self.delivered = delivered
        self.pending: deque[tuple[str, str, str, LogPos]] = deque()  # stream, iso, line, pos
        self.written: tuple[int, int] | None = None
        self.resent: ResentLines | None = None  # after a re-attach, until the overlap ends

    def save(self) -> None:
        key = (self.delivered.ns, self.delivered.count)
        if key == self.written:
            return
        data = {"container": self.container_id, "delivered": self.delivered.to_json()}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)
        self.written = key


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
