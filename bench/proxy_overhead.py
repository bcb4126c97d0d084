"""proxy_overhead: what the master's proxy adds, against going straight to the service.

One notebook on the bench cluster; its JupyterLab is the service. (1) 1,000 small requests
(`GET api/status`, one after another) through the proxy and straight to Jupyter, interleaved in
blocks of 50: throughput ratio and added p99 latency. (2) A 100 MB file (written by the kernel)
downloaded through the proxy and straight. (3) 50 kernel WebSockets open at once through the
proxy, each running 1+1. Targets (issue 38): >= 0.8 x throughput, p99 added <= 5 ms, and all 50
sockets answered.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

import requests
import websocket

from bench._cluster import cluster
from bench._jupyter import direct_target, execute, wait_ok
from bench._report import Row, percentile, publish

NAME = "proxy_overhead"
MB = 1 << 20


def _latencies(session: requests.Session, url: str, headers: dict[str, str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = session.get(url, headers=headers, timeout=30)
        r.raise_for_status()
        out.append(time.perf_counter() - t0)
    return out


def _download(url: str, headers: dict[str, str]) -> float:
    t0 = time.perf_counter()
    got = 0
    with requests.get(url, headers=headers, stream=True, timeout=120) as r:
        r.raise_for_status()
        for chunk in r.iter_content(MB):
            got += len(chunk)
    assert got == 100 * MB, got
    return time.perf_counter() - t0


def _sockets(base: str, kernel: str, headers: dict[str, str], n: int) -> tuple[int, float]:
    url = base.replace("http://", "ws://", 1) + f"api/kernels/{kernel}/channels"
    header = [f"{k}: {v}" for k, v in headers.items()]
    socks = [websocket.create_connection(url, header=header, timeout=120) for _ in range(n)]
    ok: list[bool] = []
    t0 = time.perf_counter()

    def one(ws: websocket.WebSocket) -> None:
        ok.append(execute(ws, "1+1") == "2")

    threads = [threading.Thread(target=one, args=(ws,)) for ws in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    spent = time.perf_counter() - t0
    for ws in socks:
        ws.close()
    return sum(ok), spent


def run(requests_n: int = 1000, sockets: int = 50, docs: bool = True) -> bool:
    with cluster(NAME, slots=1) as cl:
        proxy_h = {"Authorization": f"Bearer {cl.client.session.token}"}
        nb = cl.client.start_notebook({})
        proxy = cl.client.proxy_url(nb["id"])
        wait_ok(proxy + "api/status", proxy_h)
        direct, token = direct_target(cl.sql, nb["id"])
        direct_h = {"Authorization": f"token {token}"}
        r = requests.post(proxy + "api/kernels", headers=proxy_h, json={"name": "python3"})
        r.raise_for_status()
        kernel = r.json()["id"]
        ws_url = proxy.replace("http://", "ws://", 1) + f"api/kernels/{kernel}/channels"
        ws = websocket.create_connection(
            ws_url, header=[f"Authorization: {proxy_h['Authorization']}"]
        )
        execute(ws, "open('big.bin', 'wb').write(bytes(100 * 1024 * 1024))")
        ws.close()

        s = requests.Session()
        _latencies(s, proxy + "api/status", proxy_h, 20)  # warm-up: connections, caches
        _latencies(s, direct + "api/status", direct_h, 20)
        via: list[float] = []
        straight: list[float] = []
        for _ in range(requests_n // 50):
            via += _latencies(s, proxy + "api/status", proxy_h, 50)
            straight += _latencies(s, direct + "api/status", direct_h, 50)
        dl_via = statistics.median(_download(proxy + "files/big.bin", proxy_h) for _ in range(3))
        dl_direct = statistics.median(
            _download(direct + "files/big.bin", direct_h) for _ in range(3)
        )
        answered, ws_s = _sockets(proxy, kernel, proxy_h, sockets)
        cl.client.kill_notebook(nb["id"])
    ratio = sum(straight) / sum(via)
    p99_added = (percentile(via, 99) - percentile(straight, 99)) * 1000
    dl_ratio = dl_direct / dl_via
    load = os.getloadavg()[0]
    ms = lambda v: f"{v * 1000:.2f} ms"  # noqa: E731
    rows: list[Row] = [
        (f"{len(via)} small requests: throughput via proxy / direct", f"{ratio:.2f} x", ">= 0.8 x"),
        ("small request p50: via proxy / direct", f"{ms(statistics.median(via))} / "
         f"{ms(statistics.median(straight))}", ""),
        ("small request p99: via proxy / direct", f"{ms(percentile(via, 99))} / "
         f"{ms(percentile(straight, 99))}", ""),
        ("p99 added by the proxy", f"{p99_added:.2f} ms", "<= 5 ms"),
        ("100 MB download: via proxy / direct (median of 3)", f"{100 / dl_via:.0f} / "
         f"{100 / dl_direct:.0f} MB/s", ""),
        ("100 MB download: throughput via proxy / direct", f"{dl_ratio:.2f} x", ">= 0.8 x"),
        (f"{sockets} concurrent kernel WebSockets answered", f"{answered} in {ws_s:.2f} s",
         f"{sockets}"),
        ("load average (1 min) at the end", f"{load:.1f}", ""),
    ]  # fmt: skip
    summary = (
        "The master's proxy (aiohttp beside waitress) against going straight to a notebook's "
        "JupyterLab on the same machine: sequential small requests (interleaved blocks of 50), "
        "a 100 MB download, and kernel WebSockets open at once through one master."
    )
    raw: dict[str, Any] = {"via": via, "direct": straight, "dl_via": dl_via,
                           "dl_direct": dl_direct, "answered": answered, "load": load}  # fmt: skip
    publish(NAME, summary, rows, raw, docs)
    return ratio >= 0.8 and p99_added <= 5 and dl_ratio >= 0.8 and answered == sockets
