"""What the notebook benchmarks share: a kernel's first result over its WebSocket, and where a
notebook's Jupyter listens (read from the bench cluster's database)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import requests
import websocket


def kernel_result(base: str, headers: dict[str, str], code: str = "6*7") -> str:
    """Start a kernel at `base` (.../proxy/ID/), run `code` over its WebSocket, return the
    result's text; raises on any failure."""
    r = requests.post(base + "api/kernels", headers=headers, json={"name": "python3"}, timeout=60)
    r.raise_for_status()
    kernel = r.json()["id"]
    ws_url = base.replace("http://", "ws://", 1) + f"api/kernels/{kernel}/channels"
    ws = websocket.create_connection(
        ws_url, header=[f"{k}: {v}" for k, v in headers.items()], timeout=60
    )
    try:
        return execute(ws, code)
    finally:
        ws.close()


def execute(ws: websocket.WebSocket, code: str) -> str:
    msg_id = uuid.uuid4().hex
    ws.send(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "username": "bench",
                    "session": uuid.uuid4().hex,
                    "msg_type": "execute_request",
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {"code": code, "silent": False, "store_history": False},
                "channel": "shell",
                "buffers": [],
            }
        )
    )
    while True:
        msg = json.loads(ws.recv())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            raise RuntimeError(f"kernel error: {msg['content']}")
        if msg["msg_type"] == "execute_result":
            return str(msg["content"]["data"]["text/plain"])


def wait_ok(url: str, headers: dict[str, str], timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if requests.get(url, headers=headers, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def direct_target(sql: Any, task_id: str) -> tuple[str, str]:
    """(http://127.0.0.1:PORT/proxy/ID/, Jupyter's token) of a running notebook: the bench
    measures the proxy against going straight to the service."""
    (containers,) = sql("SELECT containers FROM allocations WHERE task_id = %s", task_id)[0]
    (spec,) = sql("SELECT spec FROM tasks WHERE id = %s", task_id)[0]
    containers = containers if isinstance(containers, dict) else json.loads(containers)
    spec = spec if isinstance(spec, dict) else json.loads(spec)
    port = next(c["proxy_port"] for c in containers.values() if c.get("proxy_port"))
    return f"http://127.0.0.1:{port}/proxy/{task_id}/", str(spec["service_token"])
