"""What a shell's WebSocket carries (pure).

Binary frames are terminal bytes: keystrokes to the task, output from it. Text frames are JSON
control messages: the client sends `{"resize": [rows, cols]}`; the server ends a session with
`{"exit": CODE}` (the shell's exit status, 128 + N when killed by signal N, as a shell says).
The first size and the command come in the URL: `ws?rows=R&cols=C&term=T&cmd=JSON-ARGV`.
"""

from __future__ import annotations

import json
from typing import Any

MAX_ROWS_COLS = 10_000


def resize_message(rows: int, cols: int) -> str:
    return json.dumps({"resize": [rows, cols]})


def exit_message(code: int) -> str:
    return json.dumps({"exit": code})


def parse_control(text: str) -> dict[str, Any]:
    """A control message, checked; {} for anything this side does not understand."""
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(body, dict):
        return {}
    out: dict[str, Any] = {}
    size = body.get("resize")
    if (
        isinstance(size, list)
        and len(size) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in size)
        and all(0 < v <= MAX_ROWS_COLS for v in size)
    ):
        out["resize"] = (size[0], size[1])
    code = body.get("exit")
    if isinstance(code, int) and not isinstance(code, bool):
        out["exit"] = code
    return out


def exit_status(returncode: int) -> int:
    """A process's status as a shell reports it: its code, or 128 + the signal that killed it."""
    return 128 - returncode if returncode < 0 else returncode


def parse_size(rows: str | None, cols: str | None) -> tuple[int, int]:
    try:
        r, c = int(rows or 24), int(cols or 80)
    except ValueError:
        return 24, 80
    if not (0 < r <= MAX_ROWS_COLS and 0 < c <= MAX_ROWS_COLS):
        return 24, 80
    return r, c


def parse_command(raw: str | None) -> list[str] | None:
    """The argv to run instead of a login shell (`det shell open ID -- CMD`), or None."""
    if not raw:
        return None
    try:
        argv = json.loads(raw)
    except ValueError:
        return None
    if isinstance(argv, list) and argv and all(isinstance(a, str) and a for a in argv):
        return argv
    return None
