"""The AWS adapter on its own: boto3 against moto's server, through a small loopback proxy that
answers some RunInstances calls with EC2's own errors (moto never runs out of capacity)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
import requests

from master.provisioner.aws import AwsProvider
from master.provisioner.config import parse_provider
from master.provisioner.provider import LaunchError, LaunchRequest

ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
    "<Message>{message}</Message></Error></Errors><RequestID>r-1</RequestID></Response>"
)


class FaultyEc2:
    """Forwards to moto, except RunInstances calls that `fail(params)` answers with an error."""

    def __init__(self, moto_url: str) -> None:
        self.calls: list[dict[str, str]] = []
        self.rules: list[tuple[str, str, str, str]] = []  # (param, value, code, message)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                params = {k: v[0] for k, v in parse_qs(body.decode()).items()}
                if params.get("Action") == "RunInstances":
                    outer.calls.append(params)
                    for key, value, code, message in outer.rules:
                        if params.get(key) == value:
                            data = ERROR.format(code=code, message=message).encode()
                            self.send_response(400)
                            self.send_header("Content-Length", str(len(data)))
                            self.end_headers()
                            self.wfile.write(data)
                            return
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "content-length")
                }
                r = requests.post(moto_url + self.path, data=body, headers=headers, timeout=30)
                self.send_response(r.status_code)
                self.send_header("Content-Length", str(len(r.content)))
                self.send_header("Content-Type", r.headers.get("Content-Type", "text/xml"))
                self.end_headers()
                self.wfile.write(r.content)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def faulty(moto_url: str) -> Iterator[FaultyEc2]:
    f = FaultyEc2(moto_url)
    try:
        yield f
    finally:
        f.server.shutdown()


def provider(url: str, **over: object) -> AwsProvider:
    raw = {
        "type": "aws",
        "region": "us-west-2",
        "endpoint_url": url,
        "image_id": "ami-0abcdef1234567890",
        "instance_type": "p3.2xlarge",
        "instance_slots": 1,
        "tag_value": "c1",
        **over,
    }
    return AwsProvider(parse_provider(raw, "provider"), "gpu", "c1")


def test_spot_without_capacity_falls_back_to_on_demand(faulty: FaultyEc2) -> None:
    faulty.rules.append(
        (
            "InstanceMarketOptions.MarketType",
            "spot",
            "InsufficientInstanceCapacity",
            "There is no Spot capacity available that matches your request.",
        )
    )
    p = provider(faulty.url, spot=True)
    inst = p.launch(
        LaunchRequest(launch_id="l1", name="det-agent", user_data="#!/bin/bash", spot=True)
    )
    assert inst.spot is False  # on demand
    kinds = [c.get("InstanceMarketOptions.MarketType") for c in faulty.calls]
    assert kinds == ["spot", None]
    listed = p.list_instances()
    assert [(i.cloud_id, i.launch_id, i.pool) for i in listed] == [(inst.cloud_id, "l1", "gpu")]


def test_spot_with_capacity_stays_spot(faulty: FaultyEc2) -> None:
    inst = provider(faulty.url, spot=True).launch(
        LaunchRequest(launch_id="l2", name="det-agent", user_data="", spot=True)
    )
    assert inst.spot is True and len(faulty.calls) == 1


def test_launch_errors_name_the_cloud_reason(faulty: FaultyEc2) -> None:
    faulty.rules.append(
        ("ImageId", "ami-0abcdef1234567890", "InvalidAMIID.NotFound", "The image id does not exist")
    )
    p = provider(faulty.url)
    with pytest.raises(LaunchError, match="InvalidAMIID.NotFound: The image id does not exist"):
        p.launch(LaunchRequest(launch_id="l3", name="det-agent", user_data=""))
    assert p.list_instances() == []
    faulty.rules[:] = [
        ("InstanceType", "p3.2xlarge", "VcpuLimitExceeded", "You have requested more vCPU")
    ]
    with pytest.raises(LaunchError, match="VcpuLimitExceeded"):
        p.launch(LaunchRequest(launch_id="l4", name="det-agent", user_data="", spot=True))


def test_terminate_and_list_only_this_pool(moto_url: str) -> None:
    a = provider(moto_url)
    b = AwsProvider(a.cfg, "other-pool", "c1")
    ia = a.launch(LaunchRequest(launch_id="la", name="x", user_data=""))
    ib = b.launch(LaunchRequest(launch_id="lb", name="x", user_data=""))
    assert [i.cloud_id for i in a.list_instances()] == [ia.cloud_id]
    a.terminate([ia.cloud_id])
    assert a.list_instances() == []
    assert [i.cloud_id for i in b.list_instances()] == [ib.cloud_id]
