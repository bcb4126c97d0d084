"""Pure checks of JSON values before they reach PostgreSQL (which refuses NUL in text and jsonb)."""

from __future__ import annotations

from typing import Any

BIGINT_MAX = 2**63 - 1


def first_nul(value: Any, path: str) -> str | None:
    """The dotted path of the first key or string in `value` holding NUL, else None.

    Iterative, so a deeply nested value costs no recursion.
    """
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return where
        elif isinstance(item, dict):
            for key, sub in item.items():
                if isinstance(key, str) and "\x00" in key:
                    return where
                stack.append((sub, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))
    return None
