"""Signed-in browsers: a session cookie holding a web session id, and CSRF tokens.

Signing in creates a server-side session record (an `auth_tokens` row of kind "web": stored
hashed, expiring with `token_ttl_hours`, revoked on sign-out, on a password change or when
the user is deactivated), so a page and the REST API see the same user with the same rights.
The id in the cookie is not an API token: sent as a bearer it is refused (`master.auth.resolve`),
so a cookie read off a machine gives no API access. The cookie is signed (Flask's session),
HttpOnly and SameSite=Lax; every state-changing request must also carry the session's CSRF token.
"""

from __future__ import annotations

import hmac
import os
import secrets
from datetime import timedelta
from pathlib import Path

from flask import Flask, g, request, session

from master.auth import Principal, resolve, revoke_token
from master.db import db
from master.errors import APIError, Unauthenticated

COOKIE_NAME = "detlab_session"
SESSION_ID = "sid"  # the cookie's key for the web session id
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"


class CSRFError(APIError):
    status, code = 400, "csrf"


def load_or_create_secret(data_dir: Path) -> str:
    """The key that signs session cookies: DET_WEB_SECRET, or one generated into the data dir."""
    env = os.environ.get("DET_WEB_SECRET")
    if env:
        return env
    path = Path(data_dir) / "web_secret"
    if path.exists():
        return path.read_text().strip()
    secret = secrets.token_urlsafe(48)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    return secret


def configure(app: Flask) -> None:
    cfg = app.config["DET"]
    if not app.secret_key:
        app.secret_key = load_or_create_secret(cfg.data_dir)
    app.config.update(
        SESSION_COOKIE_NAME=COOKIE_NAME,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=os.environ.get("DET_WEB_COOKIE_SECURE", "") in ("1", "true", "yes"),
        PERMANENT_SESSION_LIFETIME=timedelta(hours=cfg.token_ttl_hours),
        # The cookie lives as long as its token; re-signing it on every poll is wasted work.
        SESSION_REFRESH_EACH_REQUEST=False,
    )


def csrf_token() -> str:
    token = session.get(CSRF_FIELD)
    if not token:
        token = secrets.token_urlsafe(32)
        session[CSRF_FIELD] = token
    return token


def check_csrf() -> None:
    """Refuse a state-changing request without this session's CSRF token (form or header)."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    sent = request.form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""
    expected = session.get(CSRF_FIELD) or ""
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CSRFError(
            "the form's security token is missing or out of date; reload the page and try again"
        )


def current_user() -> Principal | None:
    """The signed-in user (cached on `g`), or None; a revoked or expired token signs out."""
    if "web_principal" in g:
        return g.web_principal
    p: Principal | None = None
    sid = session.get(SESSION_ID)
    if "token" in session:  # a cookie from before session ids held the API token itself
        session.pop("token")
    if sid:
        try:
            p = resolve(sid, kind="web")
        except APIError:
            session.pop(SESSION_ID, None)
            p = None
        if p is not None and p.kind != "user":
            p = None
    g.web_principal = p
    return p


def sign_in(username: str, password: str) -> Principal | None:
    """Sign in (None: wrong name or password); throttled like the API's login (429 raised)."""
    from master.services.user.users import log_in

    try:
        sid, _user = log_in(username, password, request.remote_addr, kind="web")
    except Unauthenticated:
        return None
    session.clear()
    session.permanent = True
    session[SESSION_ID] = sid
    csrf_token()  # a fresh CSRF token for the new session
    g.pop("web_principal", None)
    return current_user()


def sign_out() -> None:
    sid = session.get(SESSION_ID)
    if sid:
        revoke_token(sid)
        db.session.commit()
    session.clear()
    g.pop("web_principal", None)
