"""API errors, rendered as `{"error": {"code", "message", "path"?}}` with the right status."""

from __future__ import annotations

import logging
import math

from flask import Flask, Response, jsonify
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


class TooManyRequests(APIError):
    """429 with a Retry-After header (whole seconds, rounded up)."""

    status, code = 429, "too_many_requests"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = max(1, math.ceil(retry_after))


# What a client is told to wait before retrying while the database is away (seconds).
DB_RETRY_AFTER_S = 2


def database_unavailable(err: BaseException) -> bool:
    """The database (not the request) failed: it restarted, refused or dropped the connection,
    or the pool had none free. Such a request is worth retrying; it is never a 500."""
    import sqlalchemy.exc as sa

    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, sa.DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(e, sa.OperationalError | sa.InterfaceError | sa.TimeoutError):
            return True
        if isinstance(e, sa.DisconnectionError):
            return True
        if _driver_unavailable(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def _driver_unavailable(e: BaseException) -> bool:
    """psycopg2's own errors, raised where the master uses the raw connection (COPY)."""
    try:
        import psycopg2
    except ImportError:  # SQLite-only install
        return False
    return isinstance(e, psycopg2.OperationalError | psycopg2.InterfaceError)


MAX_MESSAGE = 2000  # an error never echoes a 1 MB value back


def _short(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 15] + "... (truncated)"


def _body(status: int, code: str, message: str, path: str | None = None) -> Response:
    err: dict[str, str] = {"code": code, "message": _short(message)}
    if path is not None:
        err["path"] = _short(path)
    resp = jsonify({"error": err})
    resp.status_code = status
    return resp


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(APIError)
    def _api(e: APIError) -> Response:
        resp = _body(e.status, e.code, e.message, e.path)
        if isinstance(e, TooManyRequests):
            resp.headers["Retry-After"] = str(e.retry_after)
        return resp

    @app.errorhandler(ConfigError)
    def _config(e: ConfigError) -> Response:
        return _body(400, "validation", str(e), e.path)

    @app.errorhandler(IllegalTransition)
    def _transition(e: IllegalTransition) -> Response:
        return _body(409, "conflict", str(e))

    @app.errorhandler(HTTPException)
    def _http(e: HTTPException) -> Response:
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
    def _internal(e: Exception) -> Response:
        if database_unavailable(e):
            return _database_away(e)
        refused = _database_refused(e)
        if refused is not None:
            return refused
        log.exception("unhandled error")
        # The text of an unexpected error may hold SQL or paths: it goes to the master's log.
        return _body(500, "internal", f"internal error ({type(e).__name__}; see the master's log)")


def _database_refused(e: BaseException) -> Response | None:
    """A value the database would not store (too long, out of range, a constraint): the
    request's fault, so a 4xx, but the database's words (SQL, columns, COPY lines) stay in
    the log. Routes check their fields first; this is the net under them."""
    import sqlalchemy.exc as sa

    if not isinstance(e, sa.DataError | sa.IntegrityError):
        return None
    from master.db import db

    try:
        db.session.rollback()
    except Exception:
        log.debug("rollback after a refused write failed", exc_info=True)
    log.warning("database refused a write: %s", str(e.orig).strip().splitlines()[0])
    if isinstance(e, sa.IntegrityError):
        return _body(
            409, "conflict", "the request conflicts with stored data (nothing was changed)"
        )
    return _body(
        400, "validation", "a value in the request cannot be stored (too long or out of range)"
    )


def _database_away(e: BaseException) -> Response:
    """503 + Retry-After: clients (the harness, agents) retry; nothing half-done was kept."""
    from master.db import db

    try:
        db.session.rollback()
    except Exception:  # the connection is gone already; the pool replaces it
        log.debug("rollback after a database outage failed", exc_info=True)
    log.warning("database unavailable: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
    resp = _body(503, "unavailable", "the master's database is unavailable; retry shortly")
    resp.headers["Retry-After"] = str(DB_RETRY_AFTER_S)
    return resp
