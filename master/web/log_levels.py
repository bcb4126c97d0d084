"""Log lines read by their level, not their stream (pure; no I/O).

Python's logging writes every record, INFO included, to stderr, so colouring stderr red paints a
healthy trial's log red. `log_level` reads the level a line states (`INFO:root:...`,
`2026-01-01 12:00:00,123 - WARNING - ...`, `[ERROR] ...`, `[rank=0] INFO: ...`) and treats
tracebacks and `SomeError: message` lines as errors. `error_lines` picks what a failed trial's
page shows: the last traceback, else the last error lines (as Determined's web UI and CLI
summarise a failure).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

LEVELS = ("error", "warning", "info", "debug")

# A level word near the start of the line (after a timestamp, logger name, rank prefix...),
# standing alone: `INFO:`, `- INFO -`, `[INFO]`, ` INFO `; not `information` or `ERRORS`.
_LEVEL = re.compile(
    r"^.{0,80}?(?<![A-Za-z0-9_])(CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)(?![A-Za-z0-9_])"
)
_NAMES = {
    "CRITICAL": "error",
    "FATAL": "error",
    "ERROR": "error",
    "WARNING": "warning",
    "WARN": "warning",
    "INFO": "info",
    "DEBUG": "debug",
}
TRACEBACK = "Traceback (most recent call last):"
# The last line of a traceback: `ValueError: bad`, `torch.cuda.OutOfMemoryError: ...`,
# `KeyboardInterrupt`.
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Warning)\b(?::|$)"
)


def log_level(line: str) -> str | None:
    """`error`, `warning`, `info` or `debug` when the line says so; None when it does not."""
    stripped = line.lstrip()
    if stripped.startswith(TRACEBACK) or _EXCEPTION.match(stripped):
        return "error"
    m = _LEVEL.match(line)
    return _NAMES[m.group(1)] if m else None


def error_lines(lines: Sequence[str], limit: int = 20) -> list[str]:
    """The lines that explain a failure, oldest first, at most `limit`: the last traceback
    (through its exception line), else the last lines at level error, else nothing."""
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].lstrip().startswith(TRACEBACK):
            start = i
            break
    if start is not None:
        end = start + 1
        while end < len(lines):
            text = lines[end]
            end += 1
            if _EXCEPTION.match(text) and not text[:1].isspace():
                break  # the exception line closes the traceback
        picked = list(lines[start:end])
        return picked if len(picked) <= limit else [picked[0], *picked[-(limit - 1) :]]
    errors = [ln for ln in lines if log_level(ln) == "error"]
    return errors[-limit:]
