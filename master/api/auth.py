"""Health, login/logout and users."""

from __future__ import annotations

from flask import Blueprint, jsonify
from sqlalchemy import select

from master import __version__
from master.api._util import json_body, require_str
from master.auth import (
    bearer_token,
    check_password,
    hash_password,
    new_token,
    principal,
    require_admin,
    require_user,
    revoke_token,
)
from master.db import db
from master.errors import BadRequest, Conflict, Forbidden, NotFound, Unauthenticated
from master.models import User

bp = Blueprint("auth", __name__)


@bp.get("/health")
def health():  # type: ignore[no-untyped-def]
    return jsonify({"status": "ok", "version": __version__})


@bp.get("/master/stats")
def master_stats():  # type: ignore[no-untyped-def]
    """The scheduler tick's lateness, for operators and the load benchmark."""
    require_user()
    from flask import current_app

    stats = current_app.extensions.get("det_tick_stats")
    return jsonify({"scheduler_tick": stats.snapshot() if stats else {"ticks": 0}})


@bp.post("/auth/login")
def login():  # type: ignore[no-untyped-def]
    body = json_body()
    username = require_str(body, "username")
    password = body.get("password")
    if not isinstance(password, str):
        raise BadRequest("password is required", path="password")
    user = db.session.execute(select(User).where(User.username == username)).scalar_one_or_none()
    if user is None or not user.active or not check_password(user.password_hash, password):
        raise Unauthenticated("wrong username or password")
    token = new_token(user_id=user.id)
    db.session.commit()
    return jsonify({"token": token, "user": user.to_json()})


@bp.post("/auth/logout")
def logout():  # type: ignore[no-untyped-def]
    require_user()
    token = bearer_token()
    assert token
    revoke_token(token)
    db.session.commit()
    return jsonify({})


@bp.get("/me")
def me():  # type: ignore[no-untyped-def]
    p = require_user()
    user = db.session.get(User, p.user_id)
    assert user is not None
    return jsonify({"user": user.to_json()})


@bp.get("/users")
def list_users():  # type: ignore[no-untyped-def]
    require_user()
    users = db.session.execute(select(User).order_by(User.id)).scalars()
    return jsonify({"users": [u.to_json() for u in users]})


def _check_password_strength(password: object) -> str:
    if not isinstance(password, str) or len(password) < 8:
        raise BadRequest("password must be a string of at least 8 characters", path="password")
    return password


@bp.post("/users")
def create_user():  # type: ignore[no-untyped-def]
    require_admin()
    body = json_body()
    username = require_str(body, "username")
    if (
        len(username) > 128
        or not username.replace("-", "").replace("_", "").replace(".", "").isalnum()
    ):
        raise BadRequest(
            "username may use letters, digits, '-', '_' and '.' (at most 128)", path="username"
        )
    password = _check_password_strength(body.get("password"))
    if db.session.execute(select(User).where(User.username == username)).scalar_one_or_none():
        raise Conflict(f"user {username!r} already exists")
    user = User(
        username=username, password_hash=hash_password(password), admin=bool(body.get("admin"))
    )
    db.session.add(user)
    db.session.commit()
    return jsonify({"user": user.to_json()}), 201


@bp.patch("/users/<username>")
def update_user(username: str):  # type: ignore[no-untyped-def]
    p = require_user()
    body = json_body()
    user = db.session.execute(select(User).where(User.username == username)).scalar_one_or_none()
    if user is None:
        raise NotFound(f"user {username!r} not found")
    if not p.admin and (p.user_id != user.id or set(body) - {"password"}):
        raise Forbidden("only an admin may change other users or admin/active flags")
    if "password" in body:
        user.password_hash = hash_password(_check_password_strength(body["password"]))
    if "admin" in body:
        user.admin = bool(body["admin"])
    if "active" in body:
        user.active = bool(body["active"])
    db.session.commit()
    return jsonify({"user": user.to_json()})


__all__ = ["bp", "principal"]
