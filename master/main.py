"""`det-master`: run the master."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from master.config import MasterConfigError, load_master_config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="det-master", description="Run the detlab master.")
    p.add_argument("--config", help="master.yaml")
    p.add_argument("--db", help="database URL (default: SQLite in the data dir; or DET_DB_URL)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8080)")
    p.add_argument(
        "--proxy-port", type=int, help="the notebook/shell proxy's port (default: a free one)"
    )
    p.add_argument(
        "--data-dir", help="data directory (default $DET_DATA_DIR or ~/.local/share/detlab)"
    )
    p.add_argument(
        "--agent-timeout", type=float, help="seconds without a poll before an agent is LOST"
    )
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("apscheduler", "alembic.runtime.plugins"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cfg = load_master_config(
            args.config,
            db=args.db,
            host=args.host,
            port=args.port,
            proxy_port=args.proxy_port,
            data_dir=args.data_dir,
            agent_timeout=args.agent_timeout,
        )
    except MasterConfigError as e:
        print(f"det-master: {e}", file=sys.stderr)
        return 2
    from waitress import create_server

    from master.app import create_app, start_master
    from master.instance_lock import MasterAlreadyRunning
    from master.request_limits import largest_body
    from master.serve import limited_channel

    try:
        app = create_app(cfg)
        start_master(app)
    except MasterAlreadyRunning as e:
        print(f"det-master: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bad DB URL or an unreachable database
        logging.getLogger("detlab.master").exception("cannot start")
        print(f"det-master: cannot start: {e}", file=sys.stderr)
        return 1
    server = create_server(
        app,
        host=cfg.host,
        port=cfg.port,
        threads=cfg.server_threads,
        connection_limit=4096,
        channel_timeout=120,
        ident="detlab",
        max_request_body_size=largest_body(cfg.max_model_def_bytes),
    )
    # Each route's body limit is enforced once the headers are in (master/request_limits.py).
    server.channel_class = limited_channel(cfg.max_model_def_bytes)
    _accept_all_pending(server)
    try:
        proxy_port = _start_proxy(app, cfg.host, cfg.proxy_port)
    except OSError as e:
        print(f"det-master: cannot listen for the proxy on port {cfg.proxy_port}: {e}")
        return 1
    db_kind = "SQLite" if cfg.db_url.startswith("sqlite") else "PostgreSQL"
    print(
        f"detlab master listening on http://{cfg.host}:{server.effective_port} "
        f"({db_kind}, data dir {cfg.data_dir}; proxy on port {proxy_port})",
        flush=True,
    )
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    return 0


def _start_proxy(app: Any, host: str, port: int) -> int:
    """The proxy to notebooks and shells (master/proxy): aiohttp in its own thread, because
    waitress (WSGI) cannot carry WebSockets; docs/architecture.md."""
    from master.context import EXTENSION
    from master.proxy.server import ProxyServer
    from master.web.session import COOKIE_NAME

    state = app.extensions[EXTENSION]
    proxy = ProxyServer(app, state.proxy.activity, COOKIE_NAME)
    state.proxy.port = proxy.start(host, port)
    return int(state.proxy.port)


def _accept_all_pending(server: Any) -> None:
    """Accept every waiting connection on each pass of waitress's loop, not one.

    Waitress accepts one connection per pass of its I/O loop, and that loop's thread competes
    for the GIL with up to `server_threads` busy request threads: 200 clients connecting at once
    waited up to 60 s for their first answer (drill_clients) while connected ones were served
    in about a second.
    """
    one = getattr(server, "handle_accept", None)
    if one is None or not hasattr(server, "_map"):  # several listen sockets: left as it is
        return

    def drain() -> None:
        for _ in range(256):  # bounded: the loop still serves the connected channels
            before = len(server._map)
            one()
            if len(server._map) == before:  # nothing was waiting (or accept failed)
                return

    server.handle_accept = drain


if __name__ == "__main__":
    sys.exit(main())
