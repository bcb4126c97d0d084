"""Checks on a parsed JSON document that the database can store: depth, NUL characters and
lone surrogates in keys and strings, finite numbers, 64-bit integers. Pure; raises BadRequest
naming the field. Used by the request gate (master/api/_guard.py) and the metrics ingest."""

from __future__ import annotations

import json
import math
from typing import Any

from detlab.text import bad_text, clean_text
from master.errors import BadRequest

MAX_JSON_DEPTH = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _join(path: str, key: str) -> str:
    shown = clean_text(key)
    return f"{path}.{shown}" if path else shown


def _where(path: str) -> str:
    return path or "request body"


def check_json(
    value: Any, *, sanitise: bool = False, max_depth: int = MAX_JSON_DEPTH, path: str = ""
) -> Any:
    """Check (or, with `sanitise`, repair the strings of) a parsed JSON document; returns it.

    Iterative, so a deep document costs no recursion. Raises BadRequest naming the field
    (under `path`, where the document sits in its request).
    """
    if isinstance(value, str):
        return _check_str(value, path, sanitise)
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            if depth >= max_depth:
                raise BadRequest(f"{_where(path)}: nested deeper than {max_depth} levels", path)
            for key in list(node):
                if isinstance(key, str) and (why := bad_text(key)):
                    if not sanitise:
                        here = _join(path, key)
                        raise BadRequest(f"key {here!r} {why}", here)
                    node[clean_text(key)] = node.pop(key)
                    key = clean_text(key)
                child, here = node[key], _join(path, key)
                if isinstance(child, str):
                    node[key] = _check_str(child, here, sanitise)
                else:
                    stack.append((child, here, depth + 1))
        elif isinstance(node, list):
            if depth >= max_depth:
                raise BadRequest(f"{_where(path)}: nested deeper than {max_depth} levels", path)
            for i, child in enumerate(node):
                here = f"{path}[{i}]"
                if isinstance(child, str):
                    node[i] = _check_str(child, here, sanitise)
                else:
                    stack.append((child, here, depth + 1))
        elif isinstance(node, float) and not math.isfinite(node):
            raise BadRequest(f"{_where(path)}: expected a finite number, got {node!r}", path)
        elif (
            isinstance(node, int)
            and not isinstance(node, bool)
            and not INT64_MIN <= node <= INT64_MAX
        ):
            raise BadRequest(
                f"{_where(path)}: integer out of range (at most 64 bits: "
                f"{INT64_MIN} to {INT64_MAX})",
                path,
            )
    return value


def _check_str(value: str, path: str, sanitise: bool) -> str:
    why = bad_text(value)
    if why is None:
        return value
    if sanitise:
        return clean_text(value)
    raise BadRequest(f"{_where(path)} {why}", path or None)


def path_at_depth(text: str, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first container nested `limit` levels deep in JSON `text`, else None.

    For a document too deep to parse at all (a parser's recursion gave up): a scan of the
    text that keeps only the current key or index of each open container.
    """
    stack: list[list[Any]] = []  # [is_object, current key or index]
    i, n, want_key = 0, len(text), False
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if stack and stack[-1][0] and want_key:
                stack[-1][1], want_key = _key_text(text[i : j + 1]), False
            i = j + 1
            continue
        if c in "{[":
            if len(stack) >= limit:
                return _stack_path(stack)
            stack.append([c == "{", None if c == "{" else 0])
            want_key = c == "{"
        elif c in "}]" and stack:
            stack.pop()
        elif c == "," and stack:
            if stack[-1][0]:
                want_key = True
            else:
                stack[-1][1] += 1
        i += 1
    return None


def _key_text(quoted: str) -> str:
    try:
        key = json.loads(quoted)
    except ValueError:
        key = quoted.strip('"')
    return key if isinstance(key, str) else str(key)


def _stack_path(stack: list[list[Any]]) -> str:
    path = ""
    for is_object, at in stack:
        path = _join(path, str(at)) if is_object else f"{path}[{at}]"
    return path
