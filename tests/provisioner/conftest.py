"""Fixtures for elastic agents: moto's EC2 server on a loopback port, the fake Compute Engine
API, a metadata server for interruption notices, and booting an instance's agent."""

from __future__ import annotations

import base64
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from detlab.protocol import PROTOCOL_VERSION
from tests.cluster import BIN, Cluster, call_master, free_port, wait_for
from tests.provisioner.fake_gce import FakeComputeEngine


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def moto_url(tmp_path: Path, aws_env: None) -> Iterator[str]:
    """moto's server (EC2 and the rest) on 127.0.0.1:<free port>, for boto3 in the master."""
    port = free_port()
    log = open(tmp_path / "moto.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: requests.get(url + "/moto-api/", timeout=1).ok, 60, what="moto server")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def ec2(moto_url: str):  # type: ignore[no-untyped-def]
    import boto3

    return boto3.client("ec2", region_name="us-west-2", endpoint_url=moto_url)


@pytest.fixture
def gce() -> Iterator[FakeComputeEngine]:
    fake = FakeComputeEngine().start()
    try:
        yield fake
    finally:
        fake.stop()


class Notice:
    """A metadata server. AWS: 404 (no spot action) until `interrupt()`, then 200 + JSON.
    GCP: "FALSE" until `interrupt()`, then "TRUE"; 403 without `Metadata-Flavor: Google`."""

    def __init__(self, flavor: str = "aws") -> None:
        self.interrupted = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if flavor == "gcp":
                    if self.headers.get("Metadata-Flavor") != "Google":
                        body = b"missing Metadata-Flavor header"
                        self.send_response(403)
                    else:
                        body = b"TRUE" if outer.interrupted.is_set() else b"FALSE"
                        self.send_response(200)
                elif outer.interrupted.is_set():
                    body = b'{"action": "terminate", "time": "2026-11-26T14:00:00Z"}'
                    self.send_response(200)
                else:
                    body = b"not found"
                    self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        path = (
            "/computeMetadata/v1/instance/preempted"
            if flavor == "gcp"
            else "/latest/meta-data/spot/instance-action"
        )
        self.url = f"http://127.0.0.1:{self.server.server_port}{path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def interrupt(self) -> None:
        self.interrupted.set()

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture
def notice() -> Iterator[Notice]:
    n = Notice()
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture
def gce_notice() -> Iterator[Notice]:
    n = Notice("gcp")
    try:
        yield n
    finally:
        n.stop()


TOKEN_RE = re.compile(r"^export DET_AGENT_TOKEN=(\S+)$", re.M)


def join_token(user_data: str) -> str:
    m = TOKEN_RE.search(user_data)
    assert m, user_data
    return m.group(1).strip("'")


def ec2_user_data(ec2, instance_id: str) -> str:  # type: ignore[no-untyped-def]
    attr = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(attr["UserData"]["Value"]).decode()


def boot_agent(
    cluster: Cluster,
    agent_id: str,
    token: str,
    pool: str,
    slots: int = 1,
    *extra: str,
    wait: bool = True,
) -> subprocess.Popen:
    """'Boot' an instance: a real det-agent with the instance's id and its own join token."""
    env = cluster.env()
    env["DET_AGENT_TOKEN"] = token
    env["DET_DATA_DIR"] = str(cluster.tmp / f"data-{agent_id}")
    args = [
        str(BIN / "det-agent"),
        "--master",
        cluster.url,
        "--agent-id",
        agent_id,
        "--resource-pool",
        pool,
        "--slots",
        str(slots),
        "--work-dir",
        str(cluster.tmp / f"work-{agent_id}"),
        "--kill-grace",
        "3",
        "--runtime",
        "process",
        "--poll-wait",
        "2",
        *extra,
    ]
    log = open(cluster.tmp / f"{agent_id}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    cluster.agents[agent_id] = proc
    if wait:
        wait_for(lambda: cluster._agent_state(agent_id) == "ACTIVE", 90, what=f"agent {agent_id}")
    return proc


def pools(cluster: Cluster) -> dict[str, dict]:
    return {p["name"]: p for p in cluster.get("/provisioner/pools")["pools"]}


def poll_with(cluster: Cluster, agent_id: str, token: str) -> int:
    r = call_master(
        "POST",
        f"{cluster.url}/api/v1/agents/{agent_id}/poll",
        json={"protocol": PROTOCOL_VERSION, "slots": [], "wait": 0, "resource_pool": "gpu"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    return r.status_code
