"""The application factory."""

from __future__ import annotations

import logging

from flask import Flask
from sqlalchemy import event

from master.auth import authenticate, load_or_create_agent_token
from master.config import MasterConfig
from master.db import db
from master.errors import register_error_handlers

log = logging.getLogger("detlab.master")


def _engine_options(url: str, threads: int) -> dict:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30, "check_same_thread": False}}
    return {"pool_size": 16, "max_overflow": max(16, threads), "pool_pre_ping": True}


def create_app(config: MasterConfig, *, start_background: bool = True) -> Flask:
    """Build the master: DB (migrated), auth, API, and the background jobs."""
    from master.api import register_api
    from master.bootstrap import ensure_admin
    from master.migrate import upgrade

    app = Flask("master")
    config.data_dir.mkdir(parents=True, exist_ok=True)
    app.config.update(
        DET=config,
        SQLALCHEMY_DATABASE_URI=config.db_url,
        SQLALCHEMY_ENGINE_OPTIONS=_engine_options(config.db_url, config.server_threads),
        MAX_CONTENT_LENGTH=config.max_model_def_bytes + 1024 * 1024,
        JSON_SORT_KEYS=False,
        AGENT_TOKEN=load_or_create_agent_token(config.data_dir),
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    if start_background:  # this process runs the cluster: it must be the database's only master
        from master.instance_lock import MasterLock

        lock = MasterLock(config.db_url)
        app.extensions["det_master_lock"] = lock
        lock.watch(_stop_master)
    db.init_app(app)
    with app.app_context():
        if db.engine.dialect.name == "sqlite":
            event.listen(db.engine, "connect", _sqlite_pragmas)
            db.engine.dispose()
        upgrade(db.engine)
        ensure_admin()
        _grace_for_agents()
    from sqlalchemy.orm import Session

    from master.services.scheduling import after_commit

    if not event.contains(Session, "after_commit", after_commit):
        event.listen(Session, "after_commit", after_commit)
    register_error_handlers(app)
    app.before_request(authenticate)
    register_api(app)
    from master.web import register_web

    register_web(app)  # the web pages at /
    if start_background:
        from master.jobs import start_jobs
        from master.services.scheduling import Kicker

        kicker = Kicker(app)
        kicker.start()
        app.extensions["det_kicker"] = kicker
        app.extensions["det_jobs"] = start_jobs(app)
        kicker.kick()
    return app


def _stop_master(why: str) -> None:
    """The database now belongs to another master: stop rather than schedule alongside it."""
    import logging
    import os
    import signal

    logging.getLogger("detlab.master").critical("stopping: %s", why)
    os.kill(os.getpid(), signal.SIGTERM)


def _grace_for_agents() -> None:
    """The master was down, not the agents: give each a full timeout to poll again."""
    from master.db import utcnow
    from master.models import Agent

    db.session.execute(
        Agent.__table__.update().where(Agent.state == "ACTIVE").values(last_seen=utcnow())
    )
    db.session.commit()


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    # WAL lets readers run while a writer commits; busy_timeout waits instead of failing.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
