"""Small request helpers shared by the blueprints."""

from __future__ import annotations

from typing import Any

from flask import request

from master.api._guard import require_object
from master.errors import BadRequest


def json_body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if body is None:
        if not request.data:
            return {}
        raise BadRequest("request body must be JSON")
    return require_object(body)


def int_arg(name: str, default: int, lo: int = 0, hi: int = 2**62, args: Any = None) -> int:
    """An integer query argument in [lo, hi] (of `args`, default the request's), else 400."""
    raw = (request.args if args is None else args).get(name)
    if raw is None or raw == "":
        return default
    try:
        val = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {raw!r}", path=name) from None
    if not lo <= val <= hi:
        raise BadRequest(f"{name} must be between {lo} and {hi}", path=name)
    return val


def float_arg(name: str, default: float, lo: float = 0.0, hi: float = 3600.0) -> float:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        val = float(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a number, got {raw!r}", path=name) from None
    return max(lo, min(hi, val))


def str_arg(name: str, default: str | None = None) -> str | None:
    """A text query argument; NUL is a 400 naming it (PostgreSQL refuses it in a filter)."""
    raw = request.args.get(name)
    if raw is None:
        return default
    if "\x00" in raw:
        raise BadRequest(f"{name} must not contain NUL characters", path=name)
    return raw


def bool_arg(name: str, default: bool = False) -> bool:
    raw = request.args.get(name)
    if raw is None:
        return default
    return raw.lower() in ("1", "true", "yes", "on")


def require_str(body: dict, key: str) -> str:
    val = body.get(key)
    if not isinstance(val, str) or not val:
        raise BadRequest(f"{key} is required (a non-empty string)", path=key)
    if "\x00" in val:  # PostgreSQL refuses NUL in text: name the field rather than fail later
        raise BadRequest(f"{key} must not contain NUL characters", path=key)
    return val
