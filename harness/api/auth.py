"""Where the CLI/TUI keep login tokens: `~/.config/detlab/auth.json` (0600), per master + user.

`DET_CONFIG_DIR` moves the directory (tests, CI). `DET_USER` + `DET_PASSWORD` log in without a
cached token (CI, scripts).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from harness.api._errors import APIError, MasterUnreachable, Unauthenticated
from harness.api._session import Session


def config_dir() -> Path:
    override = os.environ.get("DET_CONFIG_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "detlab"


def auth_path() -> Path:
    return config_dir() / "auth.json"


def _key(master: str) -> str:
    return Session(master).master  # normalized: scheme added, trailing slash dropped


def load_cache() -> dict[str, Any]:
    """`{"masters": {url: {"active": user, "tokens": {user: token}}}}`; empty when missing/bad."""
    try:
        data = json.loads(auth_path().read_text())
    except (OSError, ValueError):
        return {"masters": {}}
    if not isinstance(data, dict) or not isinstance(data.get("masters"), dict):
        return {"masters": {}}
    return data


def _save_cache(data: dict[str, Any]) -> None:
    path = auth_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".auth-", suffix=".json")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_token(master: str, username: str, token: str) -> None:
    data = load_cache()
    entry = data["masters"].setdefault(_key(master), {"active": None, "tokens": {}})
    entry.setdefault("tokens", {})[username] = token
    entry["active"] = username
    _save_cache(data)


def cached_token(master: str, username: str | None = None) -> tuple[str, str] | None:
    """`(username, token)` for `username` (default: the last user who logged in there)."""
    entry = load_cache()["masters"].get(_key(master)) or {}
    tokens = entry.get("tokens") or {}
    user = username or entry.get("active")
    if user and tokens.get(user):
        return user, tokens[user]
    return None


def remove_token(master: str, username: str | None = None) -> str | None:
    """Forget the token of `username` (default: the active user); returns who was removed."""
    data = load_cache()
    entry = data["masters"].get(_key(master))
    if not entry:
        return None
    user = username or entry.get("active")
    if not user or user not in (entry.get("tokens") or {}):
        return None
    del entry["tokens"][user]
    if entry.get("active") == user:
        entry["active"] = None
    _save_cache(data)
    return user


def login(master: str, username: str, password: str, cache: bool = True) -> Session:
    """Log in with a password and (by default) remember the token for later commands."""
    session = Session(master)
    body = session.post("/auth/login", {"username": username, "password": password})
    session.token = body["token"]
    if cache:
        save_token(session.master, username, body["token"])
    return session


UNREACHABLE_HINT = "is it running? check DET_MASTER or -m"


def unreachable(master: str, err: MasterUnreachable | None = None) -> MasterUnreachable:
    """The one wording for a master that does not answer, for people (CLI, det-tui):
    `cannot reach the master at URL (is it running? check DET_MASTER or -m): reason`."""
    text = str(err) if err else ""
    if UNREACHABLE_HINT in text:
        return err if err is not None else MasterUnreachable(text)
    reason = text.rsplit(": ", 1)[-1] if ": " in text else text
    msg = f"cannot reach the master at {_key(master)} ({UNREACHABLE_HINT})"
    return MasterUnreachable(f"{msg}: {reason}" if reason else msg)


def check_reachable(master: str, timeout: float = 5.0) -> None:
    """Raise `unreachable(...)` unless the master answers its health check."""
    try:
        Session(master, timeout=timeout).get("/health")
    except MasterUnreachable as e:
        raise unreachable(master, e) from None
    except APIError:
        pass  # something answers there: the caller's own request tells what is wrong


def login_session(master: str) -> Session:
    """An authenticated `Session`: `DET_USER`+`DET_PASSWORD`, else the cached token.

    A master that does not answer is reported as such before "not logged in" (a mistyped URL
    has no cached token either, and logging in would not help)."""
    user = os.environ.get("DET_USER") or None
    password = os.environ.get("DET_PASSWORD")
    if user and password is not None:
        try:
            return login(master, user, password, cache=False)
        except MasterUnreachable as e:
            raise unreachable(master, e) from None
    found = cached_token(master, user)
    if found is None:
        check_reachable(master)
        who = user or "NAME"
        raise Unauthenticated(
            401,
            f"not logged in to {_key(master)}: run `det user login {who}` "
            "(or set DET_USER and DET_PASSWORD)",
            "unauthenticated",
        )
    return Session(master, found[1])


def current_user(master: str) -> str | None:
    """Who the CLI acts as on `master` (for messages), without asking the master."""
    if os.environ.get("DET_USER"):
        return os.environ["DET_USER"]
    found = cached_token(master)
    return found[0] if found else None
