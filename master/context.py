"""What one master keeps in memory besides its database, owned by its Flask app.

Everything here is per master, not per process: a test that builds two apps in one process gets
two of each, and nothing leaks between them. Services reach it through `master_state()` inside
an app context; nothing else in the master holds mutable module-level state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from flask import Flask, current_app

from master import lock_order
from master.config import MasterConfig
from master.log_tail import LogTails
from master.login_throttle import LoginThrottle, parse_limits
from master.notify import Hub
from master.proxy.activity import ActivityBook

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from master.auth import TokenCache
    from master.background import TickStats
    from master.instance_lock import MasterLock
    from master.log_ring import LogRing

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


class Kicks(Protocol):
    """The scheduling kicker (`services/kicker.Kicker`): runs a pass soon after a change."""

    def start(self) -> None: ...
    def kick(self) -> None: ...
    def stop(self) -> None: ...


@dataclass
class SchedulingMemory:
    """What the scheduling pass and the allocation fast paths keep between calls."""

    # Why each queued task waits (task id -> reason), refreshed by every scheduling pass.
    waiting_reasons: dict[str, str] = field(default_factory=dict)
    # Moves whenever an allocation is created or ends (after the commit): cache invalidation.
    allocation_generation: int = 0
    # When each experiment's progress was last recomputed (monotonic seconds).
    progress_at: dict[int, float] = field(default_factory=dict)
    kicker: Kicks | None = None  # set by `master.app.start_master`


@dataclass
class AgentMemory:
    """Agents' polls: the fast path's caches and the buffered heartbeats."""

    # agent id -> signature of its last full sync; cleared when it is marked LOST.
    sync: dict[str, tuple] = field(default_factory=dict)
    # agent id -> (allocation generation, has allocations): the idle-poll fast path.
    busy: dict[str, tuple[int, bool]] = field(default_factory=dict)
    # Buffered agent heartbeats: agent id -> (last seen, slot stats).
    heartbeat_lock: threading.Lock = field(default_factory=threading.Lock)
    heartbeats: dict[str, tuple[datetime, dict[str, Any]]] = field(default_factory=dict)


@dataclass
class LogMemory:
    # Serialises log inserts so sequence numbers (row ids) become visible in order.
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    # Followed trials' newest log lines, shared by their followers (master/log_tail.py).
    tails: LogTails = field(default_factory=LogTails)
    # allocation id -> (trial id or None, task id, the agents it has containers on): log ingest.
    allocation_owner: dict[str, tuple[int | None, str, frozenset[str]]] = field(
        default_factory=dict
    )


@dataclass
class CheckpointMemory:
    # Checkpoint GC: one run at a time; storage backends (SDK clients) by their config.
    gc_lock: threading.Lock = field(default_factory=threading.Lock)
    storage_backends_lock: threading.Lock = field(default_factory=threading.Lock)
    storage_backends: dict[str, Any] = field(default_factory=dict)
    # Unfinished S3 multipart uploads (upload id -> when first seen), for the orphan sweep.
    upload_first_seen: dict[str, datetime] = field(default_factory=dict)
    # Set when checkpoint deletions wait for an agent (storage only agents reach).
    agent_work: threading.Event = field(default_factory=threading.Event)
    # exp id -> (live checkpoints, newest report, replan generation) at its last GC pass, and
    # exp id -> changes to its plan's other inputs (master/ckpt/replan.py).
    gc_seen: dict[int, tuple[int, Any, int]] = field(default_factory=dict)
    replan_lock: threading.Lock = field(default_factory=threading.Lock)
    replan_generation: dict[int, int] = field(default_factory=dict)


@dataclass
class ProvisionerMemory:
    # Elastic pools: a provider adapter per pool, and when the provisioner started.
    providers: dict[str, Any] = field(default_factory=dict)
    started: datetime | None = None


@dataclass
class Lifecycle:
    """Set by `master.app.start_master`; None in an app that only serves requests (tests)."""

    master_lock: MasterLock | None = None
    jobs: BackgroundScheduler | None = None
    tick_stats: TickStats | None = None
    # The master's recent log records (`det master logs`) and when it started.
    log_ring: LogRing | None = None
    started_at: datetime | None = None


@dataclass
class ProxyMemory:
    """The proxy to interactive tasks (master/proxy): its port once listening (det-master starts
    it beside waitress) and when each task was last used through it."""

    port: int | None = None
    activity: ActivityBook = field(default_factory=ActivityBook)
    # Notebooks' idle bookkeeping (services/task/idle.py): task id -> when it was last seen busy.
    last_busy: dict[str, float] = field(default_factory=dict)
    # What the latest idle check found (services/task/idle.py): task id -> since when it has
    # been idle (epoch s); absent while in use or unknown. `GET /tasks` shows it (det-tui's IDLE).
    idle_since: dict[str, float] = field(default_factory=dict)


@dataclass
class MasterState:
    """Split by concern: what every request may need at the top, each subsystem's own below."""

    config: MasterConfig
    tokens: TokenCache
    # Failed logins per username and address (only failures count; see master/login_throttle).
    login_throttle: LoginThrottle
    # Every mutation of experiment, trial, allocation or agent state runs under this lock in its
    # own transaction: one master owns the cluster's state, so one lock keeps transitions free of
    # races on SQLite and PostgreSQL alike. The hot paths (metrics, logs) do not take it.
    state_lock: threading.RLock = field(default_factory=threading.RLock)
    # Check that no transaction takes `state_lock` after writing (master/lock_order.py).
    check_lock_order: bool = field(default_factory=lock_order.enabled)
    hub: Hub = field(default_factory=Hub)
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    scheduling: SchedulingMemory = field(default_factory=SchedulingMemory)
    agents: AgentMemory = field(default_factory=AgentMemory)
    logs: LogMemory = field(default_factory=LogMemory)
    checkpoints: CheckpointMemory = field(default_factory=CheckpointMemory)
    provisioner: ProvisionerMemory = field(default_factory=ProvisionerMemory)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    proxy: ProxyMemory = field(default_factory=ProxyMemory)


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
    """The lock every state transition runs under; take it before the transaction's first
    write (master/lock_order.py says why, and checks it under `DET_CHECK_LOCK_ORDER=1`)."""
    state = master_state()
    if state.check_lock_order:
        from master.db import db

        lock_order.check(state.state_lock, db.session())
    return state.state_lock
