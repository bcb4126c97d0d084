"""Users and their login sessions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from master.auth import check_password, hash_password, new_token
from master.db import db
from master.errors import BadRequest, Conflict, Forbidden, NotFound, Unauthenticated
from master.models import User


def find_user(username: str) -> User | None:
    return db.session.execute(select(User).where(User.username == username)).scalar_one_or_none()


def get_user(username: str) -> User:
    user = find_user(username)
    if user is None:
        raise NotFound(f"user {username!r} not found")
    return user


def all_users() -> list[User]:
    return list(db.session.execute(select(User).order_by(User.id)).scalars())


def log_in(username: str, password: str) -> tuple[str, User]:
    """A new session token for a user whose password matches (committed)."""
    user = find_user(username)
    if user is None or not user.active or not check_password(user.password_hash, password):
        raise Unauthenticated("wrong username or password")
    token = new_token(user_id=user.id)
    db.session.commit()
    return token, user


def check_password_strength(password: object) -> str:
    if not isinstance(password, str) or len(password) < 8:
        raise BadRequest("password must be a string of at least 8 characters", path="password")
    return password


def check_username(username: str) -> str:
    if (
        len(username) > 128
        or not username.replace("-", "").replace("_", "").replace(".", "").isalnum()
    ):
        raise BadRequest(
            "username may use letters, digits, '-', '_' and '.' (at most 128)", path="username"
        )
    return username


def create_user(username: str, password: object, admin: bool) -> User:
    check_username(username)
    pw = check_password_strength(password)
    if find_user(username) is not None:
        raise Conflict(f"user {username!r} already exists")
    user = User(username=username, password_hash=hash_password(pw), admin=admin)
    db.session.add(user)
    db.session.commit()
    return user


def update_user(
    username: str, changes: dict[str, Any], *, by_user_id: int | None, by_admin: bool
) -> User:
    user = get_user(username)
    if not by_admin and (by_user_id != user.id or set(changes) - {"password"}):
        raise Forbidden("only an admin may change other users or admin/active flags")
    if "password" in changes:
        user.password_hash = hash_password(check_password_strength(changes["password"]))
    if "admin" in changes:
        user.admin = bool(changes["admin"])
    if "active" in changes:
        user.active = bool(changes["active"])
    db.session.commit()
    return user
