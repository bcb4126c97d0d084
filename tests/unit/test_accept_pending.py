"""The master's waitress server accepts every waiting connection on one pass of its loop."""

from __future__ import annotations

import socket

from waitress import create_server

from master.main import _accept_all_pending


def _app(environ, start_response):  # type: ignore[no-untyped-def]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def test_one_pass_accepts_every_waiting_connection() -> None:
    server = create_server(_app, host="127.0.0.1", port=0)
    clients: list[socket.socket] = []
    try:
        _accept_all_pending(server)
        before = len(server._map)
        port = server.effective_port
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
        server.handle_accept()  # one pass of the loop (waitress alone accepts one)
        assert len(server._map) - before == 50
        server.handle_accept()  # nothing waiting: returns at once
        assert len(server._map) - before == 50
    finally:
        for c in clients:
            c.close()
        server.close()
