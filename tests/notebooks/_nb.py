"""Helpers of the notebook tests: a user of our own, JupyterLab's kernel protocol over the
proxy's WebSocket."""

from __future__ import annotations

import json
import uuid
from typing import Any

import requests
import websocket

from tests.cluster import Cluster, call_master, wait_for

PASSWORD = "correct horse battery staple"


def user_token(cluster: Cluster, name: str) -> str:
    r = cluster.post("/users", {"username": name, "password": PASSWORD})
    assert r.status_code == 201, r.text
    login = call_master(
        "POST",
        cluster.url + "/api/v1/auth/login",
        json={"username": name, "password": PASSWORD},
        timeout=30,
    )
    login.raise_for_status()
    return str(login.json()["token"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def start_notebook(cluster: Cluster, *extra: str) -> dict[str, Any]:
    """`det notebook start` as the admin: returns once JupyterLab answers through the proxy."""
    return dict(cluster.det_json("notebook", "start", "--no-browser", *extra))


def base_url(nb: dict[str, Any]) -> str:
    url = str(nb["url"])
    assert url.endswith("/lab"), url
    return url[: -len("lab")]


def new_kernel(base: str, token: str) -> str:
    r = requests.post(base + "api/kernels", headers=bearer(token), json={"name": "python3"})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def kernel_socket(base: str, kernel_id: str, token: str) -> websocket.WebSocket:
    url = base.replace("http://", "ws://", 1) + f"api/kernels/{kernel_id}/channels"
    return websocket.create_connection(url, header=[f"Authorization: Bearer {token}"], timeout=60)


def execute(ws: websocket.WebSocket, code: str, wait: bool = True) -> str | None:
    """Run `code` in the kernel (Jupyter's messaging protocol, JSON over the socket); returns
    its result's text/plain, or None when not waiting."""
    msg_id = uuid.uuid4().hex
    ws.send(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "username": "test",
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
    if not wait:
        return None

    def result() -> str | None:
        msg = json.loads(ws.recv())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            return None
        if msg["msg_type"] == "error":
            raise AssertionError(f"the kernel failed: {msg['content']}")
        if msg["msg_type"] == "execute_result":
            return str(msg["content"]["data"]["text/plain"])
        return None

    return str(wait_for(result, 60, 0, what=f"the result of {code!r}"))
