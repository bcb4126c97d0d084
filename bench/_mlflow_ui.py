"""The MLflow side of web_pages: `mlflow server` on PostgreSQL holding N runs, and the request its
UI makes for the first page of an experiment's runs (runs/search, newest first).

A few hundred runs are made through MLflow's REST API (a param and 10 metric steps each), then
copied in SQL up to N (new run ids, later start times), which its API cannot do fast enough here.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

from bench._cluster import RESULTS, database, free_port, spawn, stop, wait_for
from bench._mlflow import ensure_venv, healthy, version

PAGE = 100  # the runs table's page size in MLflow's UI


def _populate(url: str, exp_id: str, n: int, deadline: float) -> int:
    """Create up to n finished runs (a param, 10 metric steps each) with 4 threads."""
    made = 0
    lock = threading.Lock()
    api = f"{url}/api/2.0/mlflow"

    def worker(start: int) -> None:
        nonlocal made
        s = requests.Session()
        for i in range(start, n, 4):
            if time.monotonic() > deadline:
                return
            try:
                one(s, i)
            except (requests.RequestException, KeyError, ValueError):
                continue  # counted as not made
            with lock:
                made += 1

    def one(s: requests.Session, i: int) -> None:
        now = int(time.time() * 1000)
        run = s.post(
            f"{api}/runs/create",
            json={"experiment_id": exp_id, "start_time": now, "run_name": f"bench-run-{i}"},
            timeout=60,
        ).json()["run"]["info"]["run_id"]
        s.post(
            f"{api}/runs/log-batch",
            json={
                "run_id": run,
                "params": [{"key": "lr", "value": str(0.001 * (1 + i % 10))}],
                "metrics": [
                    {"key": "loss", "value": 1.0 / (1 + k), "timestamp": now, "step": k}
                    for k in range(10)
                ],
            },
            timeout=60,
        ).raise_for_status()
        s.post(
            f"{api}/runs/update",
            json={"run_id": run, "status": "FINISHED", "end_time": now + 1000},
            timeout=60,
        ).raise_for_status()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return made


# MLflow's tables keyed by run (the copies get new run ids, everything else as the original).
RUN_TABLES = ("runs", "params", "tags", "latest_metrics", "metrics")


def _multiply(db_url: str, copies: int) -> int:
    """Copy every run `copies - 1` times in SQL (made through the API ones are slow to make on
    a busy machine); returns the number of runs."""
    import psycopg2

    conn = psycopg2.connect(db_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TEMP TABLE copy_map AS SELECT run_uuid AS old, "
                "md5(run_uuid || ':' || g) AS new, g FROM runs, generate_series(1, %s) g",
                (copies - 1,),
            )
            for table in RUN_TABLES:
                cur.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_name = %s AND table_schema = 'public'",
                    (table,),
                )
                cols = [c for (c,) in cur.fetchall() if c != "run_uuid"]
                if not cols:
                    continue
                quoted = ", ".join(f'"{c}"' for c in cols)
                picked = ", ".join(
                    "t.start_time + m.g" if (table, c) == ("runs", "start_time") else f't."{c}"'
                    for c in cols
                )
                cur.execute(
                    f'INSERT INTO "{table}" (run_uuid, {quoted}) '  # noqa: S608 - our names
                    f'SELECT m.new, {picked} FROM "{table}" t JOIN copy_map m ON t.run_uuid = m.old'
                )
            cur.execute("ANALYZE")
            cur.execute("SELECT count(*) FROM runs")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def run(n: int, populate_s: float = 300.0, through_api: int = 200) -> dict[str, Any]:
    python = ensure_venv()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / "logs" / f"mlflow-ui-{stamp}"
    artifacts = Path(tempfile.mkdtemp(prefix="mlflow-artifacts-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with database("mlflow_bench_web") as db_url:
        server = spawn(
            [
                str(python.parent / "mlflow"),
                "server",
                "--backend-store-uri",
                db_url.replace("postgresql://", "postgresql+psycopg2://", 1),
                "--default-artifact-root",
                artifacts.as_uri(),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                # One worker: on a busy 2-core machine uvicorn's supervisor declares slow
                # workers dead and kills them mid-request.
                "--workers",
                "1",
            ],
            logs / "server.log",
        )
        try:
            wait_for("mlflow server health", lambda: healthy(url), 180, [server])
            exp_id = requests.post(
                f"{url}/api/2.0/mlflow/experiments/create", json={"name": "bench"}, timeout=60
            ).json()["experiment_id"]
            t0 = time.monotonic()
            made = _populate(url, exp_id, min(n, through_api), time.monotonic() + populate_s)
            api_made = made
            if made and made < n:
                made = _multiply(db_url, -(-n // made))
            print(
                f"  MLflow: {api_made:,} runs through its API, {made:,} in all, "
                f"{time.monotonic() - t0:.0f} s",
                flush=True,
            )
            body = {
                "experiment_ids": [exp_id],
                "max_results": PAGE,
                "order_by": ["attributes.start_time DESC"],
                "run_view_type": "ACTIVE_ONLY",
            }
            s = requests.Session()
            search = f"{url}/ajax-api/2.0/mlflow/runs/search"
            for _ in range(3):
                s.post(search, json=body, timeout=60).raise_for_status()
            times = []
            for _ in range(30):
                t = time.perf_counter()
                r = s.post(search, json=body, timeout=60)
                times.append(time.perf_counter() - t)
                r.raise_for_status()
            shown = len(r.json().get("runs", []))
            shell = []
            for _ in range(10):
                t = time.perf_counter()
                s.get(f"{url}/", timeout=60).raise_for_status()
                shell.append(time.perf_counter() - t)
        finally:
            stop(server)
            shutil.rmtree(artifacts, ignore_errors=True)
    return {
        "version": version(python).removeprefix("MLflow "),
        "runs": made,
        "runs_through_api": api_made,
        "page_size": PAGE,
        "rows_returned": shown,
        "first_page": times,
        "shell": shell,
        "first_page_median_s": statistics.median(times),
    }
