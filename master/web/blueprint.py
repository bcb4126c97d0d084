"""The web blueprint: sign-in gate, CSRF, security headers, HTML errors, third-party files."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Response,
    abort,
    jsonify,
    redirect,
    render_template,
    request,
    send_from_directory,
    url_for,
)
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from detlab.expconf import ConfigError
from master.auth import can_steer
from master.errors import APIError
from master.states import IllegalTransition
from master.web import format as fmt
from master.web.session import check_csrf, csrf_token, current_user

HERE = Path(__file__).resolve().parent
# Installed by scripts/install (`npm ci` from master/web/package-lock.json), never committed.
NODE_MODULES = HERE / "node_modules"
VENDOR = {
    "htmx.min.js": "htmx.org/dist/htmx.min.js",
    "uPlot.iife.min.js": "uplot/dist/uPlot.iife.min.js",
    "uPlot.min.css": "uplot/dist/uPlot.min.css",
}

bp = Blueprint(
    "web",
    __name__,
    template_folder="templates",
    static_folder="static",
    static_url_path="/static/web",
)

PUBLIC = {"web.login", "web.static", "web.vendor"}

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; "
    "base-uri 'none'; object-src 'none'"
)


def wants_json() -> bool:
    return request.path.endswith(".json")


def safe_next(target: str | None) -> str:
    """Only same-site paths after sign-in (never another host)."""
    if not target:
        return url_for("web.experiments")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return url_for("web.experiments")
    return target


@bp.before_request
def _gate() -> ResponseReturnValue | None:
    if request.endpoint in ("web.static", "web.vendor"):
        return None
    check_csrf()
    if request.endpoint in PUBLIC:
        return None
    if current_user() is None:
        if wants_json() or request.headers.get("HX-Request"):
            # A script's request (a live refresh) must not swap the sign-in page into a table.
            resp = jsonify({"error": {"code": "unauthenticated", "message": "sign in first"}})
            resp.status_code = 401
            return resp
        nxt = request.full_path if request.method == "GET" else request.referrer
        return redirect(url_for("web.login", next=nxt.rstrip("?") if nxt else None))
    return None


@bp.after_request
def _headers(resp: Response) -> Response:
    resp.headers.setdefault("Content-Security-Policy", CSP)
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("X-Frame-Options", "DENY")
    resp.headers.setdefault("Referrer-Policy", "same-origin")
    if resp.mimetype in ("text/html", "application/json"):
        resp.headers.setdefault("Cache-Control", "no-store")
    return resp


def _error(status: int, code: str, message: str) -> ResponseReturnValue:
    if wants_json():
        resp = jsonify({"error": {"code": code, "message": message}})
        resp.status_code = status
        return resp
    return render_template("error.html", status=status, message=message), status


@bp.errorhandler(APIError)
def _api_error(e: APIError) -> ResponseReturnValue:
    return _error(e.status, e.code, e.message)


@bp.errorhandler(ConfigError)
def _config_error(e: ConfigError) -> ResponseReturnValue:
    return _error(400, "validation", str(e))


@bp.errorhandler(IllegalTransition)
def _transition(e: IllegalTransition) -> ResponseReturnValue:
    return _error(409, "conflict", str(e))


@bp.errorhandler(HTTPException)
def _http(e: HTTPException) -> ResponseReturnValue:
    return _error(e.code or 500, "error", e.description or e.name)


@bp.get("/static/vendor/<name>")
def vendor(name: str) -> ResponseReturnValue:
    """Third-party browser files from the npm install (a fixed list, nothing else)."""
    rel = VENDOR.get(name)
    if rel is None or not (NODE_MODULES / rel).is_file():
        abort(404, description=f"{name} is not installed (run scripts/install)")
    return send_from_directory(NODE_MODULES, rel, max_age=3600)


@bp.app_template_global()
def vendor_installed() -> bool:
    return all((NODE_MODULES / rel).is_file() for rel in VENDOR.values())


@bp.context_processor
def _globals() -> dict:
    user = current_user()
    return {
        "me": user,
        "csrf_token": csrf_token,
        "may_steer": lambda owner_id: can_steer(user, owner_id),
        "fmt": fmt,
    }


@bp.app_template_filter("metric")
def _metric_filter(value: object) -> str:
    return fmt.metric(value)


@bp.app_template_filter("utc_iso")
def _iso_filter(value: Any) -> str:
    from master.db import iso

    return iso(value) or ""
