"""A fake master for unit tests of clients (CLI, harness, TUI, agent): a Flask app in a thread.

Tests add the routes they need to `fake.app`; every request is recorded in `fake.calls`.
`stop()` + `start()` keep the port, which simulates a master restart (connection refused).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from flask import Flask, jsonify, request
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server


@dataclass
class Call:
    method: str
    path: str
    args: dict[str, str]
    json: Any
    headers: dict[str, str]


def api_error(status: int, code: str, message: str, path: str | None = None) -> Any:
    """A response in the contract's error shape."""
    err: dict[str, Any] = {"code": code, "message": message}
    if path:
        err["path"] = path
    resp = jsonify({"error": err})
    resp.status_code = status
    return resp


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


class FakeMaster:
    def __init__(self) -> None:
        self.app = Flask("fake-master")
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

        @self.app.before_request
        def _record() -> None:
            body = request.get_json(silent=True) if request.is_json else None
            with self._lock:
                self.calls.append(
                    Call(
                        request.method,
                        request.path,
                        dict(request.args),
                        body,
                        dict(request.headers),
                    )
                )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def calls_to(self, path_suffix: str, method: str | None = None) -> list[Call]:
        with self._lock:
            return [
                c
                for c in self.calls
                if c.path.endswith(path_suffix) and (method is None or c.method == method)
            ]

    def start(self) -> FakeMaster:
        self._server = make_server(
            "127.0.0.1", self.port, self.app, threaded=True, request_handler=_QuietHandler
        )
        self.port = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeMaster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
