"""Text a database can store: no NUL (PostgreSQL text and JSONB refuse it) and no lone UTF-16
surrogate (not encodable as UTF-8). Shared by the master's request gate and the config schema."""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


def bad_text(value: str) -> str | None:
    """What is wrong with a string that cannot be stored (None when nothing is)."""
    m = _BAD_CHARS.search(value)
    if m is None:
        return None
    if m.group() == "\x00":
        return "contains a NUL character (\\u0000)"
    return f"contains a lone surrogate (\\u{ord(m.group()):04x}), which is not valid Unicode"


def clean_text(value: str) -> str:
    """`value` with NUL and lone surrogates replaced by U+FFFD."""
    return _BAD_CHARS.sub(REPLACEMENT, value)
