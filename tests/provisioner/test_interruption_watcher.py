"""The agent's interruption watcher against a local metadata server, AWS and GCP style."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.interruption import InterruptionWatcher, notice
from tests.cluster import wait_for


class Metadata:
    """GCP: /preempted says FALSE or TRUE (needs Metadata-Flavor: Google). AWS: spot
    instance-action 404 or 200 JSON, behind an IMDSv2 session token."""

    def __init__(self) -> None:
        self.preempted = False
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:  # noqa: N802
                self._send(200, b"imds-token")

            def do_GET(self) -> None:  # noqa: N802
                outer.headers.append(dict(self.headers))
                if self.path.endswith("/instance/preempted"):
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._send(403, b"missing Metadata-Flavor")
                    return self._send(200, b"TRUE" if outer.preempted else b"FALSE")
                if self.headers.get("X-aws-ec2-metadata-token") != "imds-token":
                    return self._send(401, b"")
                if outer.preempted:
                    return self._send(200, b'{"action": "stop", "time": "2026-11-26T14:00:00Z"}')
                return self._send(404, b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def md() -> Iterator[Metadata]:
    m = Metadata()
    try:
        yield m
    finally:
        m.server.shutdown()


def test_gcp_preempted_flag(md: Metadata) -> None:
    url = md.base + "/computeMetadata/v1/instance/preempted"
    assert notice(url) is None
    md.preempted = True
    assert notice(url) == "TRUE"


def test_aws_spot_instance_action_with_imdsv2(md: Metadata) -> None:
    url = md.base + "/latest/meta-data/spot/instance-action"
    assert notice(url) is None
    md.preempted = True
    assert '"action": "stop"' in (notice(url) or "")


def test_unreachable_metadata_is_no_notice() -> None:
    from tests.cluster import free_port

    assert notice(f"http://127.0.0.1:{free_port()}/x", timeout=0.5) is None


def test_watcher_reports_once_and_retries_a_failing_master(md: Metadata) -> None:
    calls: list[str] = []

    def report(text: str) -> None:
        calls.append(text)
        if len(calls) < 2:
            raise ConnectionError("master down")

    stopping = threading.Event()
    w = InterruptionWatcher(
        md.base + "/computeMetadata/v1/instance/preempted", report, stopping, interval=0.05
    ).start()
    try:
        wait_for(lambda: len(md.headers) >= 3, 10, what="a few reads")
        assert calls == []
        md.preempted = True
        wait_for(lambda: len(calls) == 2, 10, what="reported (after one retry)")
        reads = len(md.headers)
        wait_for(lambda: not w._thread.is_alive(), 5, what="watcher done")
        assert len(md.headers) == reads and w.seen == "TRUE"
    finally:
        stopping.set()
