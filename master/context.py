"""What one master keeps in memory besides its database, owned by its Flask app.

Everything here is per master, not per process: a test that builds two apps in one process gets
two of each, and nothing leaks between them. Services reach it through `master_state()` inside
an app context; nothing else in the master holds mutable module-level state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flask import Flask, current_app

from master.config import MasterConfig
from master.login_throttle import LoginThrottle, parse_limits
from master.notify import Hub
from master.services.log_tail import LogTails

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from master.auth import TokenCache
    from master.background import TickStats
    from master.instance_lock import MasterLock
    from master.services.kicker import Kicker

EXTENSION = "detlab"


@dataclass
class Rendezvous:
    """Where the containers of a multi-container trial find each other (in memory: one master).

    A container whose wait fails (say the master restarted) simply posts again.
    """

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _store: dict[str, dict[int, str]] = field(default_factory=dict)

    def post(self, alloc_id: str, rank: int, address: str) -> None:
        with self._lock:
            self._store.setdefault(alloc_id, {})[rank] = address

    def addresses(self, alloc_id: str) -> dict[int, str]:
        with self._lock:
            return dict(self._store.get(alloc_id, {}))

    def forget(self, alloc_id: str) -> None:
        with self._lock:
            self._store.pop(alloc_id, None)


@dataclass
class MasterState:
    config: MasterConfig
    tokens: TokenCache
    # Failed logins per username and address (only failures count; see master/login_throttle).
    login_throttle: LoginThrottle
    # Every mutation of experiment, trial, allocation or agent state runs under this lock in its
    # own transaction: one master owns the cluster's state, so one lock keeps transitions free of
    # races on SQLite and PostgreSQL alike. The hot paths (metrics, logs) do not take it.
    state_lock: threading.RLock = field(default_factory=threading.RLock)
    # Serialises log inserts so sequence numbers (row ids) become visible in order.
    log_write_lock: threading.Lock = field(default_factory=threading.Lock)
    hub: Hub = field(default_factory=Hub)
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    # Why each queued trial waits (trial id -> reason), refreshed by every scheduling pass.
    waiting_reasons: dict[int, str] = field(default_factory=dict)
    # When each experiment's progress was last recomputed (monotonic seconds).
    progress_at: dict[int, float] = field(default_factory=dict)
    # agent id -> signature of its last full sync; cleared when it is marked LOST.
    agent_sync: dict[str, tuple] = field(default_factory=dict)
    # agent id -> (allocation generation, has allocations): the idle-poll fast path.
    agent_busy: dict[str, tuple[int, bool]] = field(default_factory=dict)
    # Moves whenever an allocation is created or ends (after the commit): cache invalidation.
    allocation_generation: int = 0
    # allocation id -> (trial id, the agents it has containers on), for log ingest.
    allocation_trial: dict[str, tuple[int, frozenset[str]]] = field(default_factory=dict)
    # Followed trials' newest log lines, shared by their followers (services/log_tails.py).
    log_tails: LogTails = field(default_factory=LogTails)
    # Buffered agent heartbeats: agent id -> (last seen, slot stats).
    heartbeat_lock: threading.Lock = field(default_factory=threading.Lock)
    heartbeats: dict[str, tuple[datetime, dict[str, Any]]] = field(default_factory=dict)
    # Checkpoint GC: one run at a time; storage backends (SDK clients) by their config.
    checkpoint_gc_lock: threading.Lock = field(default_factory=threading.Lock)
    storage_backends_lock: threading.Lock = field(default_factory=threading.Lock)
    storage_backends: dict[str, Any] = field(default_factory=dict)
    # Unfinished S3 multipart uploads (upload id -> when first seen), for the orphan sweep.
    upload_first_seen: dict[str, datetime] = field(default_factory=dict)
    # Set when checkpoint deletions wait for an agent (storage only agents reach).
    checkpoint_agent_work: threading.Event = field(default_factory=threading.Event)
    # Elastic pools: a provider adapter per pool, and when the provisioner started.
    providers: dict[str, Any] = field(default_factory=dict)
    provisioner_started: datetime | None = None
    # Set by `master.app.start_master`; None in an app that only serves requests (tests).
    master_lock: MasterLock | None = None
    kicker: Kicker | None = None
    jobs: BackgroundScheduler | None = None
    tick_stats: TickStats | None = None


def init_master_state(app: Flask, config: MasterConfig) -> MasterState:
    from master.auth import TokenCache

    state = MasterState(
        config=config,
        tokens=TokenCache(),
        login_throttle=LoginThrottle(parse_limits(config.login_throttle)),
    )
    app.extensions[EXTENSION] = state
    return state


def master_state() -> MasterState:
    """The current app's master state (inside an app or request context)."""
    return current_app.extensions[EXTENSION]


def state_lock() -> threading.RLock:
    return master_state().state_lock
