"""drill_clients: many concurrent readers against a master that stores a big model definition.

A real master on PostgreSQL holds `experiments` experiments (the first with a model definition
of `model_mb` MB, incompressible, as a real checkpointed model directory would be) with trials
and a few hundred metric rows each (seeded by SQL: no agent runs). Then `clients` threads, each
with its own HTTP session and the admin's token, loop for `seconds` over what the CLI, TUI and
web pages read: the experiment list, one experiment's description, its trials, and one trial's
metrics. Figures: requests, errors (non-200 or no answer), latency p50/p99 per read and overall,
and the master's peak resident memory (VmHWM of the det-master process).
"""

from __future__ import annotations

import io
import os
import random
import secrets
import tarfile
import threading
import time
from pathlib import Path

import psycopg2
import requests
import yaml

from bench._cluster import RESULTS, bin_path, database, free_port, spawn, stop, wait_for
from bench._report import Row, percentile, publish
from harness.api import Session
from harness.api.client import Client

NAME = "drill_clients"
TARGET_P99_S = 1.0
METRIC_ROWS = 200  # per trial
CONFIG = {
    "name": "drill",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
    "searcher": {"name": "random", "metric": "loss", "max_trials": 4, "max_length": 100},
}
READS = ("list", "describe", "trials", "metrics")


def big_model_def(mb: float) -> bytes:
    """A .tar.gz of about `mb` MB: random bytes do not compress, so the archive is that big."""
    buf = io.BytesIO()
    payload = os.urandom(int(mb * 1e6))
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name, data in (("train.py", b"print('drill')\n"), ("weights.bin", payload)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _seed(client: Client, db_url: str, experiments: int, model_mb: float) -> dict:
    big = big_model_def(model_mb)
    small = big_model_def(0.001)
    config = yaml.safe_dump(CONFIG)
    ids = [
        client.create_experiment(config, big if i == 0 else small)["id"] for i in range(experiments)
    ]
    conn = psycopg2.connect(db_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                """
                INSERT INTO metrics (trial_id, "group", steps_completed, metrics, reported_at)
                SELECT t.id, 'training', s,
                       jsonb_build_object('loss', 1.0 / s + random() / 100, 'lr', 0.01), now()
                FROM trials t, generate_series(1, %s) s
                """,
                (METRIC_ROWS,),
            )
            cur.execute("SELECT id, experiment_id FROM trials")
            trials = cur.fetchall()
            cur.execute("ANALYZE metrics")
    finally:
        conn.close()
    by_exp: dict[int, list[int]] = {}
    for tid, eid in trials:
        by_exp.setdefault(eid, []).append(tid)
    return {"experiments": ids, "trials": by_exp, "model_def_bytes": len(big)}


def _load(url: str, token: str, seed: dict, clients: int, seconds: float) -> dict:
    latencies: dict[str, list[float]] = {r: [] for r in READS}
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]
    exp_ids = seed["experiments"]

    def paths(rng: random.Random) -> list[tuple[str, str]]:
        exp = rng.choice(exp_ids)
        trial = rng.choice(seed["trials"].get(exp) or [0])
        return [
            ("list", "/experiments?limit=20"),
            ("describe", f"/experiments/{exp}"),
            ("trials", f"/experiments/{exp}/trials"),
            ("metrics", f"/trials/{trial}/metrics?limit=100"),
        ]

    def client(i: int) -> None:
        rng = random.Random(i)
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {token}"
        mine: dict[str, list[float]] = {r: [] for r in READS}
        bad: list[str] = []
        start.wait()
        while time.monotonic() < stop_at[0]:
            for read, path in paths(rng):
                t0 = time.perf_counter()
                try:
                    r = http.get(url + "/api/v1" + path, timeout=60)
                    if r.status_code != 200:
                        bad.append(f"{r.status_code} {path}")
                except requests.RequestException as e:
                    bad.append(f"{type(e).__name__} {path}")
                mine[read].append(time.perf_counter() - t0)
        with lock:
            for read in READS:
                latencies[read].extend(mine[read])
            errors.extend(bad)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.monotonic() + seconds
    t0 = time.monotonic()
    start.wait()
    for t in threads:
        t.join(seconds + 120)
    return {"latencies": latencies, "errors": errors, "elapsed": time.monotonic() - t0}


def run(
    clients: int = 200,
    seconds: float = 60.0,
    model_mb: float = 95.0,
    experiments: int = 20,
    docs: bool = True,
) -> bool:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / "work" / f"{NAME}-{stamp}"
    logs = RESULTS / "logs" / f"{NAME}-{stamp}"
    work.mkdir(parents=True)
    password = secrets.token_urlsafe(12)
    env = {**os.environ, "DET_ADMIN_PASSWORD": password}
    env.pop("DET_MASTER", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    load_before = os.getloadavg()[0]
    with database("detlab_bench_drill") as db_url:
        master = spawn(
            [bin_path("det-master"), "--db", db_url, "--port", str(port)]
            + ["--data-dir", str(work / "master")],
            logs / "master.log",
            env,
        )
        try:
            client = Client(Session(url))
            wait_for("master health", lambda: client.health(), 60, [master])
            client.login("admin", password)
            seed = _seed(client, db_url, experiments, model_mb)
            rss_seeded = _peak_rss_mb(master.pid)
            token = client.session.token
            result = _load(url, token, seed, clients, seconds)
            rss_peak = _peak_rss_mb(master.pid)
            alive = master.poll() is None
        finally:
            stop(master)
    every = sorted(x for read in READS for x in result["latencies"][read])
    p50, p99 = percentile(every, 50), percentile(every, 99)
    n, errs = len(every), len(result["errors"])
    rows: list[Row] = [
        ("requests", f"{n:,} in {result['elapsed']:.0f} s ({n / result['elapsed']:.0f}/s)", ""),
        ("errors (non-200 or no answer)", f"{errs}", "0"),
        ("latency p50 (all reads)", f"{p50 * 1000:.0f} ms", ""),
        ("latency p99 (all reads)", f"{p99 * 1000:.0f} ms", f"< {TARGET_P99_S * 1000:.0f} ms"),
    ]
    for read in READS:
        lat = sorted(result["latencies"][read])
        if lat:
            rows.append(
                (
                    f"{read}: p50 / p99",
                    f"{percentile(lat, 50) * 1000:.0f} / {percentile(lat, 99) * 1000:.0f} ms",
                    "",
                )
            )
    rows += [
        ("master peak RSS after seeding", f"{rss_seeded:.0f} MB", ""),
        ("master peak RSS (whole drill)", f"{rss_peak:.0f} MB", ""),
        ("master alive at the end", "yes" if alive else "NO", "yes"),
    ]
    ok = errs == 0 and p99 < TARGET_P99_S and alive
    publish(
        NAME,
        f"{clients} concurrent clients (threads, one HTTP session each, on the same machine) "
        f"read for {seconds:g} s from a master on PostgreSQL holding {experiments} experiments "
        f"(4 trials, {METRIC_ROWS} metric rows each), the first with a "
        f"{seed['model_def_bytes'] / 1e6:.1f} MB model definition; each client loops over the "
        "experiment list (limit 20), an experiment's description, its trials and a trial's "
        "metrics (limit 100). Latency as the clients see it; peak RSS is the master's VmHWM. "
        f"Load average before the run: {load_before:.2f}.",
        rows,
        {
            "latencies_s": result["latencies"],
            "errors": result["errors"][:200],
            "rss_mb": {"seeded": rss_seeded, "peak": rss_peak},
            "load_before": load_before,
        },
        docs=docs,
    )
    return ok
