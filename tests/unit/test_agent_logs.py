"""The log shipper: batching, order, bounded memory, retries; and the client's retry policy."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent.client import AgentClient, api_path
from agent.logs import LogShipper
from harness.api import APIError, BadRequest, MasterUnreachable, Session
from tests.unit.test_agent_loop import wait_until


class FakeClient:
    """Records every batch; fails while `down` is set."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.down = threading.Event()
        self.calls = 0
        self.error: Exception = MasterUnreachable("connection refused")

    def ship_logs(self, lines: list[dict[str, Any]]) -> None:
        self.calls += 1
        if self.down.is_set():
            raise self.error
        self.batches.append(list(lines))

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [ln for b in self.batches for ln in b]


def test_batches_and_order() -> None:
    client = FakeClient()
    shipper = LogShipper(client).start()
    for i in range(2500):
        shipper.add("a" if i % 2 else "b", "stdout", f"line {i}")
    assert shipper.flush(5)
    assert [ln["line"] for ln in client.lines] == [f"line {i}" for i in range(2500)]
    assert all(len(b) <= 1000 for b in client.batches)
    assert len(client.batches) <= 5, "lines must be batched, not sent one by one"
    first = client.lines[0]
    assert set(first) == {"allocation_id", "timestamp", "stream", "line"}
    assert first["timestamp"].endswith("Z")
    shipper.close()


def test_delivery_listeners_hear_each_accepted_batch_and_never_break_shipping() -> None:
    client = FakeClient()
    shipper = LogShipper(client, flush_interval=0.01).start()
    heard: list[list[str]] = []

    def broken(_batch: list[dict[str, Any]]) -> None:
        raise RuntimeError("a listener's bug")

    shipper.on_delivered(broken)
    shipper.on_delivered(lambda batch: heard.append([ln["line"] for ln in batch]))
    client.down.set()
    shipper.add("a", "stdout", "one")
    wait_until(lambda: client.calls >= 2, 5, "a retried batch")
    assert heard == []  # refused deliveries are not reported
    client.down.clear()
    assert shipper.flush(5)
    shipper.add("a", "stdout", "two")
    assert shipper.flush(5)
    assert [ln for batch in heard for ln in batch] == ["one", "two"]
    assert heard == [[ln["line"] for ln in b] for b in client.batches]
    shipper.close()


def test_flushes_after_interval_without_flush_call() -> None:
    client = FakeClient()
    shipper = LogShipper(client, flush_interval=0.05).start()
    shipper.add("a", "stderr", "lonely line")
    end = time.monotonic() + 30
    while not client.lines and time.monotonic() < end:
        time.sleep(0.01)
    assert [ln["line"] for ln in client.lines] == ["lonely line"]
    shipper.close()


def test_bounded_buffer_drops_oldest_and_says_so() -> None:
    client = FakeClient()
    client.down.set()
    shipper = LogShipper(client, max_lines=100, flush_interval=0.01).start()
    for i in range(250):
        shipper.add("a", "stdout", f"l{i}")
    assert shipper.pending() <= 100 + 1000  # buffer bound + one batch in flight
    assert not shipper.flush(0.3), "nothing can be delivered while the master is down"
    client.down.clear()
    assert shipper.flush(10)
    notices = [ln for ln in client.lines if ln["line"].startswith("[det-agent]")]
    real = [ln["line"] for ln in client.lines if not ln["line"].startswith("[det-agent]")]
    dropped = sum(int(n["line"].split()[1]) for n in notices)
    assert notices and all(n["allocation_id"] == "a" for n in notices)
    assert dropped + len(real) == 250
    assert real == [f"l{i}" for i in range(250 - len(real), 250)], "the newest lines survive"
    shipper.close()


def test_refused_batch_is_dropped_not_retried_forever() -> None:
    client = FakeClient()
    client.down.set()
    client.error = BadRequest(400, "logs[0].stream: bad", "validation", "logs[0].stream")
    shipper = LogShipper(client, flush_interval=0.01).start()
    shipper.add("a", "weird", "x")
    assert shipper.flush(2)
    assert client.calls == 1
    client.down.clear()
    shipper.add("a", "stdout", "y")
    assert shipper.flush(2)
    assert [ln["line"] for ln in client.lines] == ["y"]
    shipper.close()


class PoisonClient(FakeClient):
    """The master of issue 27: any batch holding a `poison` line fails with a 500."""

    def ship_logs(self, lines: list[dict[str, Any]]) -> None:
        self.calls += 1
        if any("poison" in ln["line"] for ln in lines):
            raise APIError(500, "internal error: ValueError: NUL", "internal")
        self.batches.append(list(lines))


def test_one_line_the_master_keeps_failing_on_costs_only_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = PoisonClient()
    shipper = LogShipper(client, batch_lines=64, flush_interval=0.01)
    for i in range(40):  # queued before the thread starts: one batch of 40
        shipper.add("a", "stdout", "poison" if i == 17 else f"l{i}")
    shipper.start()
    with caplog.at_level(logging.ERROR, logger="agent.logs"):
        assert shipper.flush(60), "the poisoned batch must not be retried forever"
    assert [ln["line"] for ln in client.lines] == [f"l{i}" for i in range(40) if i != 17]
    assert shipper.poisoned == 1 and "dropping it" in caplog.text
    shipper.add("a", "stdout", "later")  # and the agent ships on
    assert shipper.flush(5)
    assert client.lines[-1]["line"] == "later"
    shipper.close()


def test_an_unavailable_master_is_waited_for_not_bisected() -> None:
    client = FakeClient()
    client.error = APIError(503, "database unavailable", "unavailable")
    client.down.set()
    shipper = LogShipper(client, flush_interval=0.01).start()
    for i in range(10):
        shipper.add("a", "stdout", f"l{i}")
    wait_until(lambda: client.calls >= 5, 30)
    client.down.clear()
    assert shipper.flush(30)
    assert [ln["line"] for ln in client.lines] == [f"l{i}" for i in range(10)]
    assert len(client.batches) == 1 and shipper.poisoned == 0
    shipper.close()


# -- the real client against a tiny HTTP server --


class _Recorder(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server: Any = self.server
        server.requests += 1
        if self.headers.get("Authorization") != "Bearer tok":
            self._reply(401, {"error": {"code": "unauthenticated", "message": "bad token"}})
            return
        if any("poison" in ln.get("line", "") for ln in body.get("logs", [])):
            self._reply(500, {"error": {"code": "internal", "message": "NUL"}})
            return
        server.received.append((self.path, body))
        self._reply(200, {"accepted": len(body.get("logs", []))})

    def do_GET(self) -> None:
        data = b"\x1f\x8b tarball bytes"
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[Any]:
    srv: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    srv.received = []
    srv.requests = 0  # every POST, accepted or not
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_shipper_over_http(server: Any) -> None:
    client = AgentClient(Session(f"http://127.0.0.1:{server.server_port}", "tok"), "agent one")
    shipper = LogShipper(client).start()
    for i in range(1500):
        shipper.add("a1", "stdout", f"{i}")
    assert shipper.flush(5)
    paths = {p for p, _ in server.received}
    assert paths == {"/api/v1/agents/agent%20one/logs"}
    lines = [ln["line"] for _, body in server.received for ln in body["logs"]]
    assert lines == [str(i) for i in range(1500)]
    assert client.download_model_def("/api/v1/experiments/3/model_def").startswith(b"\x1f\x8b")
    shipper.close()


def test_client_rejection_is_not_retried(server: Any) -> None:
    client = AgentClient(Session(f"http://127.0.0.1:{server.server_port}", "wrong"), "a")
    with pytest.raises(Exception) as info:
        client.poll({"wait": 0})
    assert info.value.__class__.__name__ == "Unauthenticated"
    assert server.requests == 1, "a rejected token is not retried"


def test_a_500_on_a_log_batch_goes_back_to_the_shipper(server: Any) -> None:
    """The client retries only an unavailable master; a 500 on this batch is the shipper's
    to isolate (before issue 27 the client retried it forever, and every later line waited)."""
    client = AgentClient(Session(f"http://127.0.0.1:{server.server_port}", "tok"), "a")
    with pytest.raises(APIError) as info:
        client.ship_logs([{"allocation_id": "x", "stream": "stdout", "line": "poison"}])
    assert info.value.status == 500 and server.requests == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_client_retries_with_backoff_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    client = AgentClient(Session(f"http://127.0.0.1:{_free_port()}", "tok"), "a")
    threading.Timer(1.0, client.abort.set).start()
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agent.client"), pytest.raises(MasterUnreachable):
        client.poll({"wait": 0})
    # it kept retrying until aborted (at 1 s); the upper bound is only "it did stop"
    assert 0.9 < time.monotonic() - t0 < 60
    assert caplog.text.count("master unreachable") == 1
    # a deadline bounds a call even when nobody aborts
    client.abort.clear()
    t0 = time.monotonic()
    with pytest.raises(MasterUnreachable):
        client.ship_logs([], deadline=time.monotonic() + 0.5)
    assert 0.4 < time.monotonic() - t0 < 60


def test_api_path() -> None:
    assert api_path("/api/v1/experiments/3/model_def") == "/experiments/3/model_def"
    assert api_path("http://other:8080/api/v1/experiments/3/model_def?x=1") == (
        "/experiments/3/model_def?x=1"
    )
    assert api_path("/experiments/3/model_def") == "/experiments/3/model_def"


def test_a_poll_retried_across_an_outage_says_what_runs_now() -> None:
    """The body is built anew for each attempt: one built before an allocation started, re-sent
    to a restarted master that knows the allocation RUNNING, would read as "the agent no longer
    runs it" and cost its trial a restart (seen in the master kill -9 drill)."""
    port = _free_port()
    client = AgentClient(Session(f"http://127.0.0.1:{port}", "tok"), "a")
    builds: list[int] = []
    up: dict[str, Any] = {}

    def build() -> dict[str, Any]:
        builds.append(len(builds) + 1)
        if len(builds) == 3:  # the master comes back only after two attempts have failed
            srv: Any = ThreadingHTTPServer(("127.0.0.1", port), _Recorder)  # listens from here
            srv.received, srv.requests = [], 0
            up["srv"] = srv
            threading.Thread(target=srv.serve_forever, daemon=True).start()
        return {"wait": 0, "allocations": [f"built-{builds[-1]}"]}

    client.poll(build, deadline=time.monotonic() + 60)
    srv = up["srv"]
    srv.shutdown()
    srv.server_close()
    (path, body) = srv.received[-1]
    assert path.endswith("/poll") and len(builds) == 3
    assert body["allocations"] == [f"built-{builds[-1]}"], "the retry re-sent a stale body"
