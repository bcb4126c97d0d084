"""Users and their login sessions."""

from __future__ import annotations

import logging
import math
from typing import Any

from sqlalchemy import select

from master.auth import (
    Principal,
    check_password,
    dummy_password_hash,
    hash_password,
    new_token,
    revoke_token,
    revoke_user_tokens,
    token_cache,
)
from master.context import master_state
from master.db import db
from master.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    TooManyRequests,
    Unauthenticated,
)
from master.field_limits import check_new_password
from master.login_throttle import Lockout
from master.models import User
from master.usernames import confusable_with

logger = logging.getLogger(__name__)


def find_user(username: str) -> User | None:
    return db.session.execute(select(User).where(User.username == username)).scalar_one_or_none()


def get_user(username: str) -> User:
    user = find_user(username)
    if user is None:
        raise NotFound(f"user {username!r} not found")
    return user


def user_by_id(user_id: int | None) -> User:
    user = db.session.get(User, user_id) if user_id is not None else None
    if user is None:
        raise NotFound(f"user {user_id} not found")
    return user


def log_out(token: str) -> None:
    """The token stops working at once (the cache is evicted once the deletion commits)."""
    revoke_token(token)
    db.session.commit()


def all_users() -> list[User]:
    return list(db.session.execute(select(User).order_by(User.id)).scalars())


def _refuse(lock: Lockout) -> TooManyRequests:
    who = f"user {lock.key!r}" if lock.kind == "user" else f"address {lock.key}"
    wait = max(1, math.ceil(lock.retry_after))
    return TooManyRequests(
        f"too many failed logins for {who}; try again in {wait} s", retry_after=lock.retry_after
    )


def log_in(
    username: str, password: str, address: str | None = None, kind: str = "api"
) -> tuple[str, User]:
    """A new session token for a user whose password matches (committed).

    Throttled per username and per client address: once either has failed too often, every
    attempt is refused with 429 for a while, the right password included.
    """
    throttle = master_state().login_throttle
    addr = address or "unknown"
    name = username[:256]  # the throttle's key; a longer name matches no user anyway
    lock = throttle.check(name, addr)
    if lock is not None:
        # Debug only: a guesser hammering a locked account must not flood the log; the lockout
        # itself was logged (a warning) when it started.
        logger.debug("login refused for %r from %s: %s locked", name, addr, lock.kind)
        raise _refuse(lock)
    user = find_user(username)
    # One hash whoever asks: an unknown or deactivated user costs the time a real one does.
    usable = user is not None and user.active
    stored = user.password_hash if usable and user is not None else dummy_password_hash()
    matches = check_password(stored, password)
    if user is None or not usable or not matches:
        for started in throttle.failed(name, addr):
            logger.warning(
                "login: %s %s locked for %.0f s after too many failed logins (last for %r)",
                started.kind,
                started.key if started.kind == "address" else repr(started.key),
                started.retry_after,
                name,
            )
        raise Unauthenticated("wrong username or password")
    throttle.succeeded(name)
    token = new_token(user_id=user.id, kind=kind)
    db.session.commit()
    return token, user


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
    pw = check_new_password(password)
    if find_user(username) is not None:
        raise Conflict(f"user {username!r} already exists")
    # A lab has tens to thousands of users: comparing skeletons with each is cheap enough and
    # needs no stored column (see master/usernames.py).
    names = db.session.execute(select(User.username)).scalars()
    clash = confusable_with(username, names)
    if clash is not None:
        raise BadRequest(
            f"username {username!r} can be mistaken for the existing user {clash!r} "
            "(look-alike characters or case); choose another",
            path="username",
        )
    user = User(username=username, password_hash=hash_password(pw), admin=admin)
    db.session.add(user)
    db.session.commit()
    return user


def update_user(
    username: str, changes: dict[str, Any], by: Principal, address: str | None = None
) -> tuple[User, str | None]:
    """Change a user's password, admin or active flag: (the user, the caller's new token).

    Changing your own password needs the current one (`current_password`); an admin resetting
    another user's does not. A new password or a deactivation revokes every token and web
    session of the user; when the caller changed their own password, their session is
    reissued (the new token is returned). Re-activating a user revives none of them.
    """
    user = get_user(username)
    own = by.user_id == user.id
    if not by.admin and (not own or set(changes) - {"password", "current_password"}):
        raise Forbidden("only an admin may change other users or admin/active flags")
    revoke = False
    if "password" in changes:
        new_password = check_new_password(changes["password"])
        if own:
            _check_current_password(user, changes.get("current_password"), address)
        user.password_hash = hash_password(new_password)
        revoke = True
    if "admin" in changes:
        user.admin = bool(changes["admin"])
    if "active" in changes:
        active = bool(changes["active"])
        revoke = revoke or (user.active and not active)
        user.active = active
    reissued = None
    if revoke:
        revoke_user_tokens(user.id)
        if own and user.active:
            reissued = new_token(user_id=user.id)
    db.session.commit()
    # After the commit, so no request can re-cache the old rights: a deactivated (or demoted)
    # user's tokens are refused (or downgraded) from the very next request.
    token_cache().evict_user(user.id)
    return user, reissued


def _check_current_password(user: User, current: Any, address: str | None) -> None:
    """The caller's current password, throttled like a login (it is one more way to guess)."""
    if not isinstance(current, str):
        raise BadRequest(
            "current_password is required to change your own password", path="current_password"
        )
    throttle = master_state().login_throttle
    name, addr = user.username, address or "unknown"
    lock = throttle.check(name, addr)
    if lock is not None:
        raise _refuse(lock)
    if not check_password(user.password_hash, current):
        throttle.failed(name, addr)
        raise Forbidden("current_password is not your current password", path="current_password")
