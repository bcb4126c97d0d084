"""Small request helpers shared by the blueprints."""

from __future__ import annotations

from typing import IO, Any

from flask import current_app, request

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


def task_body() -> tuple[dict[str, Any], IO[bytes] | None]:
    """A command's, notebook's or shell's start request: `{"config": ...}` as JSON, or, with a
    `--context`, multipart: a `config` field (the config object as JSON text) and a `context` file
    (the directory's .tar.gz; master/services/task/task_context.py checks and keeps it)."""
    if request.mimetype != "multipart/form-data":
        body = json_body()
        if body.get("files"):  # Determined's JSON form of a context: base64 in the body
            raise BadRequest(
                "send a task's context as multipart/form-data (a 'context' .tar.gz file beside "
                "a 'config' field), as det --context does; JSON 'files' are not accepted",
                path="files",
            )
        return body, None
    text = request.form.get("config")
    if text is None:
        raise BadRequest("the 'config' field (the task's config as JSON) is required", "config")
    try:
        # The app's strict JSON (master/api/_guard.py): depth, NaN, NUL checked as in any body.
        config = current_app.json.loads(text)
    except ValueError as e:
        raise BadRequest(f"the 'config' field is not JSON: {e}", path="config") from None
    body = {"config": config}
    upload = request.files.get("context")
    # Werkzeug spooled the upload to a temporary file: it is checked and copied to the
    # database a chunk at a time, never read whole into memory.
    return body, upload.stream if upload else None
