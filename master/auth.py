"""Who is calling: users (login tokens), agents (the cluster token), trials (allocation tokens).

Tokens are random strings; only their SHA-256 is stored. Passwords are hashed with werkzeug's
scrypt helpers.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from flask import current_app, g, request
from sqlalchemy import select
from werkzeug.security import check_password_hash, generate_password_hash

from master.db import db, utcnow
from master.errors import Forbidden, Unauthenticated
from master.models import AgentCredential, Allocation, AuthToken, Trial, User

# What a per-agent credential starts with (tells it from user and allocation tokens).
AGENT_CREDENTIAL_PREFIX = "detagent-"


@dataclass(frozen=True)
class Principal:
    kind: str  # "user" | "agent" | "allocation"
    user_id: int | None = None
    username: str | None = None
    admin: bool = False
    allocation_id: str | None = None
    task_id: str | None = None  # an allocation token's task (a trial's, a command's, ...)
    trial_id: int | None = None
    experiment_id: int | None = None
    agent_id: str | None = None  # an instance's join token: good for this agent id alone
    # A per-agent credential (agent_credentials): bound to `agent_id` for good.
    credential: bool = False


def hash_password(password: str) -> str:
    return generate_password_hash(password)


def check_password(pw_hash: str, password: str) -> bool:
    return check_password_hash(pw_hash, password)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@functools.cache
def dummy_password_hash() -> str:
    """A hash no password matches, checked when there is no user (or an inactive one) to check
    against: every login costs one hash, so its time does not tell who exists."""
    return hash_password(secrets.token_urlsafe(32))


def new_agent_credential() -> tuple[str, str]:
    """A fresh per-agent credential and the digest the master stores of it."""
    credential = AGENT_CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
    return credential, _digest(credential)


def new_token(
    *, user_id: int | None = None, allocation_id: str | None = None, kind: str = "api"
) -> str:
    """Create and store a token (`kind` "web": a browser's session id); the caller commits."""
    token = secrets.token_urlsafe(32)
    ttl = current_app.config["DET"].token_ttl_hours
    db.session.add(
        AuthToken(
            token_hash=_digest(token),
            user_id=user_id,
            allocation_id=allocation_id,
            kind=kind,
            expires_at=utcnow() + timedelta(hours=ttl) if user_id is not None else None,
        )
    )
    return token


def revoke_user_tokens(user_id: int) -> None:
    """Revoke every API token and web session of a user; the caller commits, then evicts the
    user from the token cache (`token_cache().evict_user`)."""
    db.session.execute(
        AuthToken.__table__.update()
        .where(AuthToken.user_id == user_id, AuthToken.revoked.is_(False))
        .values(revoked=True)
    )


class TokenCache:
    """Resolved tokens for a few seconds: the metrics hot path must not query per request.

    Revocation must still take effect on the very next request, so every eviction moves a
    generation counter: a lookup that started before an eviction (it read the database while a
    user was being deactivated) does not store what it found (see `resolve`).
    """

    TTL = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, tuple[float, Principal]] = {}
        self._generation = 0

    @property
    def generation(self) -> int:
        return self._generation

    def get(self, digest: str) -> Principal | None:
        with self._lock:
            item = self._items.get(digest)
            if item and item[0] > time.monotonic():
                return item[1]
            self._items.pop(digest, None)
            return None

    def put(
        self,
        digest: str,
        principal: Principal,
        generation: int | None = None,
        ttl: float | None = None,
    ) -> None:
        """Cache a principal, unless something was evicted since `generation` was read."""
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            if len(self._items) > 10000:
                self._items.clear()
            ttl = self.TTL if ttl is None else max(0.0, min(self.TTL, ttl))
            self._items[digest] = (time.monotonic() + ttl, principal)

    def _evict_where(self, match: Callable[[Principal], bool]) -> None:
        with self._lock:
            self._generation += 1
            for k in [k for k, (_, p) in self._items.items() if match(p)]:
                del self._items[k]

    def evict_allocation(self, allocation_id: str) -> None:
        self._evict_where(lambda p: p.allocation_id == allocation_id)

    def evict_user(self, user_id: int) -> None:
        """The user was deactivated, demoted or changed: re-read every token of theirs."""
        self._evict_where(lambda p: p.kind == "user" and p.user_id == user_id)

    def evict(self, digest: str) -> None:
        with self._lock:
            self._generation += 1
            self._items.pop(digest, None)


def token_cache() -> TokenCache:
    from master.context import master_state

    return master_state().tokens


def revoke_allocation_tokens(allocation_id: str) -> None:
    """The allocation ended: its trial process (if still alive somewhere) may no longer write."""
    db.session.execute(
        AuthToken.__table__.update()
        .where(AuthToken.allocation_id == allocation_id)
        .values(revoked=True)
    )
    token_cache().evict_allocation(allocation_id)
    # Again once the caller commits (services.allocations.after_commit): a request that read the
    # token row before the commit cannot have re-cached it past this point.
    db.session.info.setdefault("det_revoked_allocations", set()).add(allocation_id)


def revoke_token(token: str) -> None:
    """Revoke one token or web session (committed); the very next request with it is refused."""
    digest = _digest(token)
    db.session.execute(
        AuthToken.__table__.update().where(AuthToken.token_hash == digest).values(revoked=True)
    )
    db.session.commit()
    # After the commit: a request that read the row before it cannot re-cache it (generation).
    for kind in KINDS:
        token_cache().evict(_cache_key(digest, kind))


KINDS = ("api", "web")


def _cache_key(digest: str, kind: str) -> str:
    # A web session id and a bearer token are cached apart: one never answers for the other.
    return digest if kind == "api" else f"{kind}:{digest}"


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header[7:].strip() or None
    return None


def resolve(token: str, kind: str = "api") -> Principal:
    """Who a bearer token (`kind` "api") or a web session id (`kind` "web") belongs to."""
    agent_token = current_app.config["AGENT_TOKEN"]
    if kind == "api" and hmac.compare_digest(token.encode(), agent_token.encode()):
        return Principal(kind="agent")
    digest = _digest(token)
    key = _cache_key(digest, kind)
    cache = token_cache()
    cached = cache.get(key)
    if cached:
        return cached
    generation = cache.generation  # read before the database: see TokenCache
    row = db.session.execute(
        select(AuthToken).where(AuthToken.token_hash == digest)
    ).scalar_one_or_none()
    if row is not None and row.kind != kind:
        raise Unauthenticated(
            "a web session id is not an API token; log in (det user login NAME)"
            if row.kind == "web"
            else "not a web session; sign in"
        )
    if row is None and kind == "api":
        agent = _resolve_agent(token, digest)
        if agent is not None:
            cache.put(key, agent, generation)
            return agent
    if row is not None and row.revoked and row.user_id is not None:
        owner = db.session.get(User, row.user_id)
        if owner is None or not owner.active:  # say why: deactivation revoked it
            raise Unauthenticated("user is deactivated")
    if row is None or row.revoked:
        raise Unauthenticated("invalid or expired token; log in again (det user login NAME)")
    ttl = None
    if row.expires_at is not None:
        exp = (
            row.expires_at
            if row.expires_at.tzinfo
            else row.expires_at.replace(tzinfo=utcnow().tzinfo)
        )
        ttl = (exp - utcnow()).total_seconds()
        if ttl <= 0:
            raise Unauthenticated("token expired; log in again (det user login NAME)")
    if row.user_id is not None:
        user = db.session.get(User, row.user_id)
        if user is None or not user.active:
            raise Unauthenticated("user is deactivated")
        p = Principal(kind="user", user_id=user.id, username=user.username, admin=user.admin)
    else:
        alloc = db.session.get(Allocation, row.allocation_id)
        if alloc is None:
            raise Unauthenticated("allocation no longer exists")
        # A command's, notebook's or shell's token has no trial or experiment: every route
        # that compares them with its own refuses it (None matches no id).
        trial = db.session.get(Trial, alloc.trial_id) if alloc.trial_id is not None else None
        p = Principal(
            kind="allocation",
            allocation_id=alloc.id,
            task_id=alloc.task_id,
            trial_id=trial.id if trial is not None else None,
            experiment_id=trial.experiment_id if trial is not None else None,
        )
    cache.put(key, p, generation, ttl)  # never cached past the token's expiry
    return p


def _resolve_agent(token: str, digest: str) -> Principal | None:
    """An agent's own credential or an elastic instance's join token (None: neither kind)."""
    if token.startswith(AGENT_CREDENTIAL_PREFIX):
        cred = db.session.execute(
            select(AgentCredential).where(AgentCredential.credential_hash == digest)
        ).scalar_one_or_none()
        if cred is None:
            raise Unauthenticated(
                "unknown agent credential (reset? an admin can issue a new one: "
                "det agent reset-credential ID)"
            )
        return Principal(kind="agent", agent_id=cred.agent_id, credential=True)
    if token.startswith("join-"):
        from master.provisioner.tokens import instance_for

        agent_id, why = instance_for(digest)
        if agent_id is None:
            raise Unauthenticated(why or "unknown join token")
        return Principal(kind="agent", agent_id=agent_id)
    return None


def authenticate() -> None:
    """before_request hook: resolve the bearer token into `g.principal` (routes check kinds)."""
    g.principal = None
    token = bearer_token()
    if token:
        g.principal = resolve(token)


def principal() -> Principal:
    p: Principal | None = g.get("principal")
    if p is None:
        raise Unauthenticated("authentication required: send 'Authorization: Bearer <token>'")
    return p


def require_user() -> Principal:
    p = principal()
    if p.kind != "user":
        raise Forbidden("this route is for users")
    return p


def require_admin() -> Principal:
    p = require_user()
    if not p.admin:
        raise Forbidden("only an admin may do this")
    return p


def require_agent(agent_id: str | None = None, *, joining: bool = False) -> Principal:
    """An agent acting as `agent_id`: its own credential, or a join token while the id has no
    credential yet (`joining`: the exchange of a join token for a credential itself)."""
    p = principal()
    if p.kind != "agent":
        raise Forbidden("this route is for agents (the cluster's agent token)")
    if p.agent_id is not None and agent_id is not None and p.agent_id != agent_id:
        what = "agent credential" if p.credential else "join token"
        raise Forbidden(f"this {what} belongs to agent {p.agent_id}, not {agent_id}")
    if joining and p.credential:
        raise Forbidden(f"agent {agent_id} already holds a credential: it needs no other")
    if not p.credential and agent_id is not None and not joining and _has_credential(agent_id):
        raise Forbidden(
            f"agent {agent_id} has its own credential: the join token no longer acts as it "
            f"(a lost credential: an admin runs det agent reset-credential {agent_id})"
        )
    return p


def _has_credential(agent_id: str) -> bool:
    return db.session.get(AgentCredential, agent_id) is not None


def require_trial_access(trial_id: int, *, write: bool = False) -> Principal:
    """Who may touch a trial's data.

    Reading: any user, and the trial's own allocation token. Writing (metrics, progress, the
    searcher operation, early exit, checkpoints): the trial's own allocation token alone. Owners
    and admins steer a trial through its experiment (pause, activate, kill), never by writing
    as if they were the trial: a posted result would change what the searcher decides. The one
    exception is an unmanaged trial (core_v2 off the cluster): it has no allocation, and its
    script reports with its owner's (or an admin's) own session.
    """
    p = principal()
    if p.kind == "allocation":
        if p.trial_id != trial_id:
            raise Forbidden(f"this session token belongs to trial {p.trial_id}, not {trial_id}")
        return p
    if p.kind == "user":
        if write and not _writes_unmanaged(p, trial_id):
            raise Forbidden(
                f"only trial {trial_id}'s own session token may write to it; "
                "steer it through its experiment (pause, activate, kill)"
            )
        return p
    raise Forbidden("agents may not access trial data")


def _writes_unmanaged(p: Principal, trial_id: int) -> bool:
    trial = db.session.get(Trial, trial_id)
    if trial is None or not trial.experiment.conf.unmanaged:
        return False
    return p.admin or trial.experiment.owner_id == p.user_id


def require_allocation(allocation_id: str) -> Principal:
    """The allocation's own session token (the harness's writes: preemption ack, rendezvous)."""
    p = principal()
    if p.kind != "allocation":
        raise Forbidden(f"only allocation {allocation_id}'s own session token may do this")
    if p.allocation_id != allocation_id:
        raise Forbidden("this session token belongs to another allocation")
    return p


def load_or_create_agent_token(data_dir: Path) -> str:
    """The cluster's agent token: DET_AGENT_TOKEN, or one generated into the data dir once."""
    import os

    env = os.environ.get("DET_AGENT_TOKEN")
    if env:
        return env
    path = Path(data_dir) / "agent_token"
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def can_steer(p: Principal | None, owner_id: int) -> bool:
    """Whether a user may change an experiment or job: its owner, or an admin."""
    return p is not None and p.kind == "user" and (p.admin or p.user_id == owner_id)
