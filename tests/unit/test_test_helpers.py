"""The test helpers' own contract: a master that answers "busy, retry" (503 + Retry-After, or 429)
is retried, as every client of the master must; anything else is handed back at once. And the
processes the tests start take Ctrl-C (SIGINT) as a program started from a terminal does."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.cluster import call_master


class Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next status of `server.statuses` (the last one repeats)."""

    def _answer(self) -> None:
        server = self.server
        assert isinstance(server, ScriptedServer)
        status = server.statuses[min(server.seen, len(server.statuses) - 1)]
        server.seen += 1
        body = b'{"ok": true}' if status < 400 else b'{"error": {"message": "busy"}}'
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "0.05")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:  # quiet test output
        pass


class ScriptedServer(ThreadingHTTPServer):
    statuses: list[int]
    seen: int = 0


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer(("127.0.0.1", 0), Scripted)
    t = threading.Thread(target=s.serve_forever, daemon=True)
    t.start()
    yield s
    s.shutdown()
    s.server_close()


def url(s: ScriptedServer) -> str:
    return f"http://127.0.0.1:{s.server_address[1]}/api/v1/x"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_busy_master_is_retried_until_it_answers(server: ScriptedServer, method: str) -> None:
    server.statuses = [503, 429, 503, 200]
    r = call_master(method, url(server), json={}, timeout=10)
    assert r.status_code == 200 and r.json() == {"ok": True}
    assert server.seen == 4


def test_other_errors_come_back_at_once(server: ScriptedServer) -> None:
    server.statuses = [500, 200]
    assert call_master("GET", url(server), timeout=10).status_code == 500
    assert server.seen == 1


def test_the_processes_tests_start_take_ctrl_c() -> None:
    """Even when the run itself was started with SIGINT ignored (a background job of a shell):
    tests/conftest.py restores it, or `det ... -f` would never stop on the tests' SIGINT."""
    out = subprocess.run(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "default_int_handler" in out, out
