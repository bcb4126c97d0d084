"""notebook_start: `det notebook start` to a kernel's first result through the master's proxy,
against starting `jupyter lab` by hand on the same machine and asking it directly.

Paired rounds, alternating: (a) the cluster: the notebook is requested, scheduled on the idle
agent, JupyterLab starts as its owner, and a kernel computes 6*7 over its WebSocket through the
proxy; (b) by hand: `python -m jupyterlab` started as a subprocess on a free port, the same
kernel round trip straight to it. Target (issue 38): (a) <= 1.5 x (b) + 1 s (medians).
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench._cluster import cluster, free_port
from bench._jupyter import kernel_result, wait_ok
from bench._report import Row, publish

NAME = "notebook_start"


def by_hand() -> float:
    port, token = free_port(), secrets.token_urlsafe(16)
    base = f"http://127.0.0.1:{port}/"
    headers = {"Authorization": f"token {token}"}
    with tempfile.TemporaryDirectory() as root:
        env = {**os.environ, "JUPYTER_TOKEN": token, "HOME": root}
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.port={port}",
             "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--allow-root"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_ok(base + "api/status", headers)
            assert kernel_result(base, headers) == "42"
            return time.monotonic() - t0
        finally:
            proc.terminate()
            proc.wait(30)


def on_cluster(cl: Any) -> float:
    headers = {"Authorization": f"Bearer {cl.client.session.token}"}
    t0 = time.monotonic()
    nb = cl.client.start_notebook({})
    base = cl.client.proxy_url(nb["id"])
    try:
        wait_ok(base + "api/status", headers)
        assert kernel_result(base, headers) == "42"
        return time.monotonic() - t0
    finally:
        cl.client.kill_notebook(nb["id"])
        end = time.monotonic() + 60
        while cl.client.get_notebook(nb["id"])["state"] != "CANCELED":
            if time.monotonic() > end:
                raise TimeoutError("the notebook did not end")
            time.sleep(0.1)


def run(rounds: int = 3, docs: bool = True) -> bool:
    cluster_s: list[float] = []
    hand_s: list[float] = []
    with cluster(NAME, slots=1) as cl:
        for i in range(rounds):
            cluster_s.append(on_cluster(cl))
            hand_s.append(by_hand())
            print(f"  round {i + 1}: det notebook start {cluster_s[-1]:.2f} s, "
                  f"by hand {hand_s[-1]:.2f} s", flush=True)  # fmt: skip
    a, b = statistics.median(cluster_s), statistics.median(hand_s)
    limit = 1.5 * b + 1.0
    load = os.getloadavg()[0]
    rows: list[Row] = [
        ("rounds (paired, alternating)", str(rounds), ""),
        ("det notebook start -> result via proxy, median", f"{a:.2f} s", f"<= {limit:.2f} s"),
        ("jupyter lab by hand -> kernel result direct, median", f"{b:.2f} s", ""),
        ("ratio", f"{a / b:.2f} x", "<= 1.5 x + 1 s"),
        ("load average (1 min) at the end", f"{load:.1f}", ""),
    ]
    summary = (
        "Time from requesting a notebook to a kernel's first result (6*7 over its WebSocket) "
        "through the master's proxy, on an idle 1-slot agent (process runtime, master on "
        "PostgreSQL), against starting JupyterLab by hand on the same machine and asking it "
        "directly. Medians of paired, alternating rounds."
    )
    publish(NAME, summary, rows, {"cluster_s": cluster_s, "hand_s": hand_s, "load": load}, docs)
    return a <= limit
