"""Per-instance join tokens: valid for one instance's agent alone, revoked on termination.

Only the SHA-256 is stored (on the instance's row). The startup script carries the token, so
user data never holds the cluster-wide agent token.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select

from master.db import db
from master.models import Instance
from master.provisioner.states import LIVE


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint() -> tuple[str, str]:
    """A new join token and its digest (store the digest)."""
    token = "join-" + secrets.token_urlsafe(32)
    return token, digest(token)


def instance_for(token_digest: str) -> tuple[str | None, str | None]:
    """(agent id, None) for a live instance's token; (None, why) for a dead or unknown one;
    (None, None) when it is no join token at all."""
    row = db.session.execute(
        select(Instance.cloud_id, Instance.state).where(Instance.join_token_hash == token_digest)
    ).first()
    if row is None:
        return None, None
    cloud_id, state = row
    if state not in LIVE:
        return None, f"this join token was revoked: its instance is {state}"
    if not cloud_id:
        return None, "this join token's instance is still being launched"
    return cloud_id, None
