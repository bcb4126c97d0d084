"""First-start set-up: the admin user."""

from __future__ import annotations

import os
import secrets
import sys

from sqlalchemy import select

from master.auth import hash_password
from master.db import db
from master.models import User


def ensure_admin() -> None:
    """Create `admin` once, with DET_ADMIN_PASSWORD or a generated password printed once."""
    if db.session.execute(select(User.id).limit(1)).first() is not None:
        return
    given = os.environ.get("DET_ADMIN_PASSWORD")
    generated = not given
    password = given or secrets.token_urlsafe(12)
    db.session.add(User(username="admin", password_hash=hash_password(password), admin=True))
    db.session.commit()
    if generated:
        print(
            f"detlab: created user 'admin' with password {password!r} "
            "(shown once; change it with `det user change-password`)",
            file=sys.stderr,
            flush=True,
        )
