"""The MLflow side of metrics_ingest: its own venv, a tracking server on PostgreSQL, 16 clients.

`run(..., mode)`: `sync` (`log_batch` waits for each call) or `async` (`synchronous=False`,
MLflow's background logging; timed until every batch is acknowledged).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg2

from bench._cluster import RESULTS, database, free_port, spawn, stop, wait_for

BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".venv-mlflow"
CLIENT = BENCH / "_mlflow_client.py"
ASYNC_THREADS = 2  # batches in flight per MLflow client process in async mode
PACKAGES = ["mlflow>=2.10", "psycopg2-binary>=2.9"]


def ensure_venv() -> Path:
    """bench/.venv-mlflow with MLflow (kept apart from detlab's dependencies); its python."""
    python = VENV / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import mlflow"]).returncode == 0:
        return python
    base = shutil.which("python3.11") or sys.executable
    print(f"  creating {VENV.relative_to(BENCH.parent)} and installing {' '.join(PACKAGES)}")
    subprocess.run([base, "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PACKAGES],
        check=True,
    )
    return python


def version(python: Path) -> str:
    out = subprocess.run(
        [python, "-c", "import mlflow; print(mlflow.__version__)"], capture_output=True, text=True
    )
    return f"MLflow {out.stdout.strip()}"


def healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
        return resp.status == 200


def run(procs: int, reports: int, deadline_s: float, mode: str = "sync") -> dict[str, Any]:
    python = ensure_venv()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / "logs" / f"mlflow-{mode}-{stamp}"
    artifacts = Path(tempfile.mkdtemp(prefix="mlflow-artifacts-"))
    barrier = Path(tempfile.mkdtemp(prefix="mlflow-bench-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with database("mlflow_bench") as db_url:
        server = spawn(
            [
                str(python.parent / "mlflow"),
                "server",
                "--backend-store-uri",
                # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; we install psycopg2.
                db_url.replace("postgresql://", "postgresql+psycopg2://", 1),
                "--default-artifact-root",
                artifacts.as_uri(),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            logs / "server.log",
        )
        clients: list[subprocess.Popen] = []
        try:
            wait_for("mlflow server health", lambda: healthy(url), 180, [server])
            for _attempt in range(5):  # a busy server's fresh workers may drop the first calls
                setup = subprocess.run(
                    [python, CLIENT, "setup", url], capture_output=True, text=True, check=False
                )
                if setup.returncode == 0:
                    break
                time.sleep(5)
            if setup.returncode != 0:
                tail = setup.stderr.strip().splitlines()[-5:]
                raise RuntimeError("MLflow setup failed: " + " | ".join(tail))
            exp_id = setup.stdout.strip()
            # MLflow's async logging sends up to 10 batches at once per process (its default
            # thread pool): 16 processes then hold 160 requests against the server's 4 workers x
            # 15 database connections, and batches fail after 30 s waiting for a connection. Two
            # in flight per process keeps every batch within the server's pool (detlab's shipper
            # has one in flight per trial).
            client_env = {**os.environ, "MLFLOW_ASYNC_LOGGING_THREADPOOL_SIZE": str(ASYNC_THREADS)}
            for i in range(procs):
                args = [exp_id, str(reports), str(barrier), str(deadline_s), str(i), mode]
                clients.append(
                    spawn(
                        [str(python), str(CLIENT), "report", url, *args],
                        logs / f"client-{i}.log",
                        env=client_env,
                    )
                )
            wait_for(
                "mlflow clients ready",
                lambda: len(list(barrier.glob("ready-*"))) >= procs,
                120,
                clients,
            )
            (barrier / "go").touch()
            for c in clients:
                c.wait(timeout=deadline_s + 120)
            results = [json.loads(p.read_text()) for p in sorted(barrier.glob("result-*.json"))]
            if len(results) < procs:
                raise RuntimeError(
                    f"only {len(results)}/{procs} MLflow clients finished; see {logs}"
                )
            conn = psycopg2.connect(db_url)
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT count(*) FROM metrics WHERE run_uuid = ANY(%s)",
                        ([r["run_id"] for r in results],),
                    )
                    (values,) = cur.fetchone()
            finally:
                conn.close()
        finally:
            for c in clients:
                stop(c)
            stop(server)
            shutil.rmtree(artifacts, ignore_errors=True)
    sent = sum(r["reports"] for r in results)
    persisted = values // 4
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    print(
        f"  MLflow ({mode}): {persisted:,} of {sent:,} reports persisted in {elapsed:.2f} s "
        f"= {persisted / elapsed:,.0f}/s",
        flush=True,
    )
    return {
        "version": version(python),
        "mode": mode,
        "deadline_s": deadline_s,
        "processes": procs,
        "sent": sent,
        "persisted": persisted,
        "elapsed_s": elapsed,
        "per_s": persisted / elapsed,
        "per_process": results,
    }
