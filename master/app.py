"""The application factory, and the explicit step that makes an app the cluster's master.

`create_app` builds the Flask app and nothing else: no database access, no threads. Then
`prepare_database` applies migrations and creates the first admin, and `start_master` (what
det-master runs) takes the database's master lock, prepares the database and starts the
background work (the scheduling kicker and the APScheduler jobs).
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask
from sqlalchemy import event
from sqlalchemy.orm import Session

from master import lock_order
from master.api._guard import StrictJSONProvider, check_request_text, enforce_body_limit
from master.auth import authenticate, load_or_create_agent_token
from master.config import MasterConfig
from master.context import MasterState, init_master_state, master_state
from master.db import db, keep_sqlite_private
from master.errors import register_error_handlers
from master.request_limits import CONFIG_BYTES

log = logging.getLogger("detlab.master")


DB_POOL_MAX = 48  # connections per master, request threads and background jobs together


def _engine_options(url: str, threads: int) -> dict:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30, "check_same_thread": False}}
    # pre_ping replaces connections a database restart killed; connect_timeout keeps a request
    # from hanging on an unreachable database (it answers 503 instead, master/errors.py).
    # The pool stays well inside PostgreSQL's default max_connections (100): a pool sized to the
    # request threads (128) asked for more than the server allows under 200 clients, and every
    # refused connection became a 503. Threads beyond the pool wait for a connection instead.
    size = min(threads, DB_POOL_MAX)
    return {
        "pool_size": min(16, size),
        "max_overflow": max(0, size - 16),
        "pool_timeout": 60,
        "pool_pre_ping": True,
        "connect_args": {"connect_timeout": 5},
    }


def create_app(config: MasterConfig) -> Flask:
    """Build the master's app: configuration, database binding, auth and the API."""
    from master.api import register_api
    from master.services.task.allocations import after_commit

    app = Flask("master")
    # Others may pass through (trials reach the default checkpoint storage below it), not list.
    config.data_dir.mkdir(mode=0o711, parents=True, exist_ok=True)
    keep_sqlite_private(config.db_url)
    app.config.update(
        DET=config,
        SQLALCHEMY_DATABASE_URI=config.db_url,
        SQLALCHEMY_ENGINE_OPTIONS=_engine_options(config.db_url, config.server_threads),
        MAX_CONTENT_LENGTH=config.max_model_def_bytes + 1024 * 1024,
        # A form field (the config YAML) may be as large as a config sent as JSON: its own
        # checks name what is wrong in it (werkzeug's 500 KB default named no field).
        MAX_FORM_MEMORY_SIZE=CONFIG_BYTES,
        JSON_SORT_KEYS=False,
        AGENT_TOKEN=load_or_create_agent_token(config.data_dir),
    )
    app.json = StrictJSONProvider(app)  # request bodies: depth, NUL, surrogates, numbers
    app.json.sort_keys = False
    init_master_state(app, config)
    db.init_app(app)
    if not event.contains(Session, "after_commit", after_commit):
        event.listen(Session, "after_commit", after_commit)
    register_error_handlers(app)
    app.before_request(enforce_body_limit)  # first: nothing reads a body over its limit
    app.before_request(check_request_text)  # before auth: a NUL must not reach a query
    app.before_request(authenticate)
    register_api(app)
    from master.web import register_web

    register_web(app)  # the web pages at /
    return app


def prepare_database(app: Flask) -> None:
    """Bring the schema to this code's version and make sure an admin exists."""
    from master.bootstrap import ensure_admin
    from master.migrate import upgrade

    with app.app_context():
        if db.engine.dialect.name == "sqlite":
            event.listen(db.engine, "connect", _sqlite_pragmas)
            db.engine.dispose()
        if master_state().check_lock_order:
            lock_order.watch(db.engine)
        upgrade(db.engine)
        ensure_admin()


def start_master(app: Flask) -> None:
    """Make this process the database's only master and start its background work.

    Raises `MasterAlreadyRunning` when another master holds the database.
    """
    from master.background import start_jobs
    from master.instance_lock import MasterLock
    from master.services.queue.kicker import Kicker

    with app.app_context():
        state = master_state()
    _keep_logs(state)
    lock = MasterLock(state.config.db_url)  # two schedulers on one database would double-book
    state.lifecycle.master_lock = lock
    lock.watch(_stop_master)
    prepare_database(app)
    with app.app_context():
        _grace_for_agents()
    state.scheduling.kicker = Kicker(app)
    state.scheduling.kicker.start()
    state.lifecycle.jobs = start_jobs(app, state)
    state.scheduling.kicker.kick()


def _keep_logs(state: MasterState) -> None:
    """Keep this master's recent log records for `det master logs`."""
    from datetime import UTC, datetime

    from master.log_ring import LogRing

    state.lifecycle.log_ring = LogRing()
    state.lifecycle.started_at = datetime.now(UTC)
    logging.getLogger().addHandler(state.lifecycle.log_ring)


def _stop_master(why: str) -> None:
    """The database now belongs to another master: stop rather than schedule alongside it."""
    import os
    import signal

    log.critical("stopping: %s", why)
    os.kill(os.getpid(), signal.SIGTERM)


def _grace_for_agents() -> None:
    """The master was down, not the agents: give each a full timeout to poll again."""
    from master.db import utcnow
    from master.models import Agent
    from master.states import AgentState

    db.session.execute(
        Agent.__table__.update().where(Agent.state == AgentState.ACTIVE).values(last_seen=utcnow())
    )
    db.session.commit()


def _sqlite_pragmas(dbapi_conn: Any, _record: object) -> None:
    # WAL lets readers run while a writer commits; busy_timeout waits instead of failing.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
