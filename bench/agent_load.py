"""agent_load: poll latency of 500 simulated agents, and whether the scheduling tick stays on time.

A real master on PostgreSQL; 500 simulated agents (8 CPU slots each, with per-slot stats as a
real agent sends) in their own pool poll with `wait: 0` every 2 s (250 polls/s). Meanwhile a
queue of experiments that cannot all run waits in the default pool with one real agent, so
every scheduling tick has work to do. Figures: poll latency percentiles seen by the agents, and
how late the APScheduler scheduling tick started (from the master's /master/stats).
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
import time
from pathlib import Path

import requests
import yaml

from bench._cluster import (
    RESULTS,
    bin_path,
    database,
    free_port,
    spawn,
    stop,
    tar_dir,
    wait_for,
)
from bench._report import Row, percentile, publish
from detlab.protocol import PROTOCOL_VERSION
from harness.api import Session
from harness.api.client import Client

NAME = "agent_load"
TARGET_P99_MS = 100.0
TRIVIAL = Path(__file__).resolve().parent / "trials" / "hello"
MASTER_YAML = {
    "resource_pools": [{"name": "default"}, {"name": "sim"}],
    "scheduling_interval": 1.0,
    "agent_timeout": 60,
}


def _slots(i: int) -> list[dict]:
    return [
        {
            "index": s,
            "type": "cpu",
            "uuid": f"sim-{i}-{s}",
            "name": "simulated",
            "memory_mb": 4096,
            "stats": {"util_percent": (i * 7 + s) % 100, "memory_used_mb": 1024},
        }
        for s in range(8)
    ]


def _poll_body(i: int) -> dict:
    return {
        "protocol": PROTOCOL_VERSION,
        "resource_pool": "sim",
        "version": "0.1.0",
        "runtime": "process",
        "hostname": f"sim-{i}",
        "slots": _slots(i),
        "allocations": [],
        "wait": 0,
    }


def run(agents: int = 500, seconds: float = 30.0, period: float = 2.0, docs: bool = True) -> bool:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / "work" / f"{NAME}-{stamp}"
    logs = RESULTS / "logs" / f"{NAME}-{stamp}"
    work.mkdir(parents=True)
    token, password = secrets.token_urlsafe(24), secrets.token_urlsafe(12)
    env = {**os.environ, "DET_ADMIN_PASSWORD": password, "DET_AGENT_TOKEN": token}
    env.pop("DET_MASTER", None)
    (work / "master.yaml").write_text(yaml.safe_dump(MASTER_YAML))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs = []
    with database("detlab_bench_agent_load") as db_url:
        try:
            procs.append(
                spawn(
                    [
                        bin_path("det-master"),
                        "--db",
                        db_url,
                        "--port",
                        str(port),
                        "--data-dir",
                        str(work / "master"),
                        "--config",
                        str(work / "master.yaml"),
                    ],
                    logs / "master.log",
                    env,
                )
            )
            client = Client(Session(url))
            wait_for("master health", lambda: client.health(), 60, procs)
            client.login("admin", password)
            procs.append(
                spawn(
                    [
                        bin_path("det-agent"),
                        "--master",
                        url,
                        "--slots",
                        "1",
                        "--runtime",
                        "process",
                        "--agent-id",
                        "real",
                    ],
                    logs / "agent.log",
                    env,
                )
            )
            # A queue that cannot all run: one slot, 40 one-slot experiments of 30 s each.
            config = yaml.safe_dump(
                {
                    "name": "queued",
                    "entrypoint": "python3 -c 'import time; time.sleep(30)'",
                    "searcher": {"name": "single", "metric": "x", "max_length": 1},
                    "max_restarts": 0,
                }
            )
            model = tar_dir(TRIVIAL)
            for _ in range(40):
                client.create_experiment(config, model)
            result = _load(url, token, agents, seconds, period)
            stats = client.session.get("/master/stats")["scheduler_tick"]
            queue_len = sum(len(p["jobs"]) for p in client.job_queues())
        finally:
            for p in reversed(procs):
                stop(p)
    lat = sorted(result["latencies_ms"])
    p50, p95, p99 = (percentile(lat, q) for q in (50, 95, 99))
    rows: list[Row] = [
        ("simulated agents (8 slots each)", f"{agents}", ""),
        (
            "polls",
            f"{len(lat):,} in {result['elapsed']:.0f} s ({len(lat) / result['elapsed']:.0f}/s)",
            "",
        ),
        ("failed polls", f"{result['errors']}", "0"),
        ("poll latency median", f"{p50:.1f} ms", ""),
        ("poll latency p95", f"{p95:.1f} ms", ""),
        ("poll latency p99", f"{p99:.1f} ms", f"< {TARGET_P99_MS:.0f} ms"),
        ("jobs in the queue during the run", f"{queue_len}", ""),
        ("scheduling ticks (1 s interval)", f"{stats.get('ticks', 0)}", ""),
        (
            "tick lateness median / p99 / max",
            f"{stats.get('lateness_ms_median', 0)} / {stats.get('lateness_ms_p99', 0)} / "
            f"{stats.get('lateness_ms_max', 0)} ms",
            "on time (< 100 ms late)",
        ),
    ]
    ok = p99 < TARGET_P99_MS and result["errors"] == 0 and stats.get("lateness_ms_p99", 1e9) < 100
    publish(
        NAME,
        f"{agents} simulated agents (own pool, 8 slots each, per-slot stats) poll a real master "
        f"on PostgreSQL with `wait: 0` every {period:g} s for {seconds:g} s, while 40 queued "
        "experiments wait in the default pool (1 real agent) so every 1 s scheduling tick has "
        "work. Latency is measured by the polling clients.",
        rows,
        {"latencies_ms": lat, "tick": stats, "errors": result["errors"]},
        docs=docs,
    )
    return ok


def _load(url: str, token: str, agents: int, seconds: float, period: float) -> dict:
    headers = {"Authorization": f"Bearer {token}"}
    work: queue.Queue[int | None] = queue.Queue()
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()

    def worker() -> None:
        http = requests.Session()
        while True:
            i = work.get()
            if i is None:
                return
            t0 = time.perf_counter()
            try:
                r = http.post(
                    f"{url}/api/v1/agents/sim-{i}/poll",
                    json=_poll_body(i),
                    headers=headers,
                    timeout=30,
                )
                ok = r.status_code == 200
            except requests.RequestException:
                ok = False
            dt = (time.perf_counter() - t0) * 1000
            with lock:
                if ok:
                    latencies.append(dt)
                else:
                    errors[0] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(48)]
    for t in threads:
        t.start()
    for i in range(agents):  # register everyone first
        work.put(i)
    while not work.empty():
        time.sleep(0.05)
    time.sleep(0.5)
    with lock:
        latencies.clear()
    start = time.monotonic()
    tick = 0
    # Each agent polls once per period, spread evenly over the period.
    while time.monotonic() - start < seconds:
        for i in range(agents):
            due = start + tick * period + i * period / agents
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            work.put(i)
        tick += 1
    for _ in threads:
        work.put(None)
    for t in threads:
        t.join(30)
    return {"latencies_ms": latencies, "errors": errors[0], "elapsed": time.monotonic() - start}
