"""One gate for request input: every JSON body, query argument and path segment is checked here
before a route sees it, so no route can store what PostgreSQL or the master cannot honour.

- JSON bodies are parsed by `StrictJSONProvider` (the app's `app.json`, so `request.get_json`
  and `json_body` both use it): nesting deeper than MAX_JSON_DEPTH levels, NaN/Infinity (also
  `1e999`), integers outside 64 bits, NUL characters and lone UTF-16 surrogates are a 400 that
  names the field (`logs[3].line`, `username`). PostgreSQL refuses NUL in text and JSONB, and
  a lone surrogate cannot be encoded as UTF-8: both used to surface as 500s at commit time.
- Routes that carry text a trial produced (an agent's log lines, its poll with exit reasons)
  are marked `@sanitises_text`: there the bad characters become U+FFFD instead, because one
  unlucky line must never make the whole batch fail (and be retried forever).
- `check_request_text` (a before_request hook) does the same for query arguments, path
  segments and urlencoded forms.

Field-level rules (lengths, ranges) stay with the routes and with `detlab.expconf`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from flask import current_app, has_request_context, request
from flask.json.provider import DefaultJSONProvider

from detlab.text import bad_text, clean_text
from master.errors import BadRequest, TooLarge
from master.jsoncheck import MAX_JSON_DEPTH, check_json

F = TypeVar("F", bound=Callable[..., Any])


def sanitises_text(view: F) -> F:
    """Mark a route whose JSON strings get U+FFFD for NUL/lone surrogates instead of a 400."""
    view._sanitises_text = True  # type: ignore[attr-defined]
    return view


def _route_sanitises() -> bool:
    if not has_request_context() or request.endpoint is None:
        return False
    view = current_app.view_functions.get(request.endpoint)
    return bool(getattr(view, "_sanitises_text", False))


def _reject_constant(name: str) -> Any:
    raise BadRequest(f"request body: {name} is not a JSON number (send a finite number)")


class StrictJSONProvider(DefaultJSONProvider):
    """The app's JSON: dumps as Flask does; loads parses request bodies through `check_json`."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            value = json.loads(s, parse_constant=_reject_constant, **kwargs)
        except RecursionError:
            raise BadRequest(f"request body: nested deeper than {MAX_JSON_DEPTH} levels") from None
        return check_json(value, sanitise=_route_sanitises())


def enforce_body_limit() -> None:
    """before_request: this route's body limit (master/request_limits.py), before any parse.

    A declared length over it is a 413 at once; a chunked body is cut off at the limit while
    it is read (werkzeug's 413). waitress refuses the same bodies before receiving them.
    """
    from master.request_limits import body_limit, has_credentials
    from master.web.session import COOKIE_NAME

    limit = body_limit(
        request.method,
        request.path,
        request.content_type or "",
        has_credentials(
            request.headers.get("Authorization"), request.headers.get("Cookie"), COOKIE_NAME
        ),
        current_app.config["DET"].max_model_def_bytes,
    )
    size = request.content_length
    if size is not None and size > limit.bytes:
        raise TooLarge(limit.message(size))
    request.max_content_length = limit.bytes


def check_request_text() -> None:
    """before_request: no NUL or lone surrogate in query arguments, path segments or forms."""
    sources: list[tuple[str, Any]] = [("query argument", request.args)]
    if request.mimetype == "application/x-www-form-urlencoded":
        sources.append(("form field", request.form))
    for what, values in sources:
        for key, value in values.items(multi=True):
            for text in (key, value):
                if isinstance(text, str) and (why := bad_text(text)):
                    raise BadRequest(f"{what} {clean_text(key)!r} {why}", clean_text(key))
    for key, value in (request.view_args or {}).items():
        if isinstance(value, str) and (why := bad_text(value)):
            raise BadRequest(f"{key} {why}", key)


def require_object(body: Any, what: str = "request body") -> dict[str, Any]:
    """`body` when it is a JSON object, else a 400 saying what was sent instead."""
    if not isinstance(body, dict):
        kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(body), "a number"
        )
        raise BadRequest(f"{what} must be a JSON object, got {kind}")
    return body
