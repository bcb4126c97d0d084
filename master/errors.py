"""API errors, rendered as `{"error": {"code", "message", "path"?}}` with the right status."""

from __future__ import annotations

import logging

from flask import Flask, jsonify
from werkzeug.exceptions import HTTPException

from detlab.expconf import ConfigError
from master.states import IllegalTransition

log = logging.getLogger("detlab.master")


class APIError(Exception):
    status = 500
    code = "internal"

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


class BadRequest(APIError):
    status, code = 400, "validation"


class Unauthenticated(APIError):
    status, code = 401, "unauthenticated"


class Forbidden(APIError):
    status, code = 403, "forbidden"


class NotFound(APIError):
    status, code = 404, "not_found"


class Conflict(APIError):
    status, code = 409, "conflict"


class TooLarge(APIError):
    status, code = 413, "too_large"


MAX_MESSAGE = 2000  # an error never echoes a 1 MB value back


def _short(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 15] + "... (truncated)"


def _body(status: int, code: str, message: str, path: str | None = None):  # type: ignore[no-untyped-def]
    err: dict[str, str] = {"code": code, "message": _short(message)}
    if path is not None:
        err["path"] = _short(path)
    resp = jsonify({"error": err})
    resp.status_code = status
    return resp


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(APIError)
    def _api(e: APIError):  # type: ignore[no-untyped-def]
        return _body(e.status, e.code, e.message, e.path)

    @app.errorhandler(ConfigError)
    def _config(e: ConfigError):  # type: ignore[no-untyped-def]
        return _body(400, "validation", str(e), e.path)

    @app.errorhandler(IllegalTransition)
    def _transition(e: IllegalTransition):  # type: ignore[no-untyped-def]
        return _body(409, "conflict", str(e))

    @app.errorhandler(HTTPException)
    def _http(e: HTTPException):  # type: ignore[no-untyped-def]
        code = {
            400: "validation",
            401: "unauthenticated",
            403: "forbidden",
            404: "not_found",
            405: "method_not_allowed",
            409: "conflict",
            413: "too_large",
        }.get(e.code or 500, "error")
        return _body(e.code or 500, code, e.description or e.name)

    @app.errorhandler(Exception)
    def _internal(e: Exception):  # type: ignore[no-untyped-def]
        log.exception("unhandled error")
        return _body(500, "internal", f"internal error: {type(e).__name__}: {e}")
