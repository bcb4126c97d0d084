"""The master itself (Determined's `det master info|config|logs`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from master import __version__
from master.api._util import int_arg
from master.auth import require_admin, require_user
from master.context import master_state

bp = Blueprint("master_info", __name__)

SECRET_WORDS = ("secret", "password", "token", "credential", "access_key", "private_key")


@bp.get("/master")
def info() -> ResponseReturnValue:
    require_user()
    state = master_state()
    cfg = state.config
    return jsonify(
        {
            "version": __version__,
            "cluster_name": "detlab",
            "database": "postgresql" if cfg.db_url.startswith("postgresql") else "sqlite",
            "started_at": started.isoformat() if (started := state.lifecycle.started_at) else None,
            "resource_pools": [p.name for p in cfg.resource_pools],
            # Where `/proxy/<task_id>/` is served (notebooks, shells): this host, this port.
            "proxy_port": state.proxy.port,
        }
    )


@bp.get("/master/config")
def config() -> ResponseReturnValue:
    """The master's configuration with every credential masked (admins only)."""
    require_admin()
    return jsonify({"config": redacted(_plain(dataclasses.asdict(master_state().config)))})


@bp.get("/master/logs")
def logs() -> ResponseReturnValue:
    """The master's recent log records (admins only): `?after=SEQ` or `?tail=N`."""
    require_admin()
    ring = master_state().lifecycle.log_ring
    after = int_arg("after", 0)
    tail = int_arg("tail", -1, -1, 100_000)
    limit = int_arg("limit", 1000, 1, 10_000)
    rows = ring.read(after, None if tail < 0 else tail, limit) if ring else []
    return jsonify({"logs": rows})


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def redacted(value: Any, key: str = "") -> Any:
    """Mask values under secret-looking keys and the password of database URLs."""
    if isinstance(value, dict):
        return {k: redacted(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, key) for v in value]
    if isinstance(value, str) and any(w in key.lower() for w in SECRET_WORDS):
        return "********"
    if isinstance(value, str) and "://" in value and "@" in value:
        from sqlalchemy.engine import make_url

        try:
            return make_url(value).render_as_string(hide_password=True)
        except Exception:  # noqa: BLE001 - not a database URL: leave it
            return value
    return value
