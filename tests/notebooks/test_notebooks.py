"""Notebooks end to end (issue 38): `det notebook start` runs real JupyterLab on a real agent,
as its owner; a kernel's WebSocket goes through the master's proxy with the CLI's login, and
the proxy answers 401 without credentials and 403 to another user."""

from __future__ import annotations

import re

import psycopg2
import pytest
import requests
import websocket

from tests.cluster import ADMIN_PASSWORD, Cluster, wait_for
from tests.notebooks._nb import (
    base_url,
    bearer,
    execute,
    kernel_socket,
    new_kernel,
    start_notebook,
    user_token,
)

pytestmark = pytest.mark.integration


def _service_token(cluster: Cluster, task_id: str) -> str:
    assert cluster.db_url is not None
    with psycopg2.connect(cluster.db_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT spec FROM tasks WHERE id = %s", (task_id,))
        spec = cur.fetchone()[0]
    spec = spec if isinstance(spec, dict) else __import__("json").loads(spec)
    return str(spec["service_token"])


def test_a_kernel_computes_through_the_proxy_for_its_owner_only(cluster: Cluster) -> None:
    nb = start_notebook(cluster)
    base = base_url(nb)
    token = cluster.token

    kernel = new_kernel(base, token)
    ws = kernel_socket(base, kernel, token)
    try:
        assert execute(ws, "6*7") == "42"
        # As its owner's Unix identity, never the agent's (root here).
        assert execute(ws, "__import__('os').getuid() != 0") == "True"
    finally:
        ws.close()

    # Without credentials: 401, over HTTP and the WebSocket alike.
    assert requests.get(base + "api/kernels", timeout=10).status_code == 401
    ws_url = base.replace("http://", "ws://", 1) + f"api/kernels/{kernel}/channels"
    with pytest.raises(websocket.WebSocketBadStatusException) as no_login:
        websocket.create_connection(ws_url, timeout=10)
    assert no_login.value.status_code == 401
    bad = requests.get(base + "api/kernels", headers=bearer("nonsense"), timeout=10)
    assert bad.status_code == 401

    # Another user: 403; the admin (the owner here) still gets in.
    other = user_token(cluster, "mallory")
    assert requests.get(base + "api/kernels", headers=bearer(other), timeout=10).status_code == 403
    with pytest.raises(websocket.WebSocketBadStatusException) as not_theirs:
        websocket.create_connection(ws_url, header=[f"Authorization: Bearer {other}"], timeout=10)
    assert not_theirs.value.status_code == 403

    # Jupyter's own token is added by the proxy and never shown: not in any answer, not in logs.
    secret = _service_token(cluster, nb["id"])
    shown = [
        requests.get(base + "api/status", headers=bearer(token), timeout=10).text,
        cluster.request("GET", f"/notebooks/{nb['id']}").text,
        cluster.request("GET", "/tasks").text,
        cluster.det("notebook", "list").stdout,
        cluster.det("notebook", "logs", nb["id"]).stdout,
    ]
    assert all(secret not in text for text in shown)

    # A browser: the master's own address sends it to sign in, then on to the proxy, where
    # its session cookie lets it in; a write from another site with that cookie does not.
    browser = requests.Session()
    page = f"{cluster.url}/proxy/{nb['id']}/api/status"
    first = browser.get(page, allow_redirects=False, timeout=10)
    assert first.status_code == 302 and "/login" in first.headers["Location"]
    form = browser.get(cluster.url + "/login", timeout=10).text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf is not None
    signed = browser.post(
        cluster.url + "/login",
        data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": csrf.group(1)},
        timeout=10,
    )
    assert signed.ok, signed.text
    via_master = browser.get(page, timeout=10)  # 307 to the proxy port, the cookie with it
    assert via_master.status_code == 200 and via_master.url.startswith(base), via_master.url
    forged = browser.post(
        base + "api/kernels", json={}, headers={"Origin": "http://evil.example"}, timeout=10
    )
    assert forged.status_code == 403

    opened = cluster.det("notebook", "open", nb["id"], "--no-browser").stdout
    assert f"{cluster.url}/proxy/{nb['id']}/lab" in opened  # the link a browser signs in by

    # Killed: CANCELED, its slot free for the next task.
    cluster.det("notebook", "kill", nb["id"])
    wait_for(
        lambda: cluster.get(f"/notebooks/{nb['id']}")["notebook"]["state"] == "CANCELED",
        60,
        what="the notebook CANCELED",
    )
    assert requests.get(base + "api/kernels", headers=bearer(token), timeout=10).status_code == 404
