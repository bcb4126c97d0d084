"""tui_refresh: det-tui stays responsive with a big cluster, and opens a long trial's chart fast.

Part 1 (refresh): 10,000 jobs and 100 agents (800 GPUs) served over HTTP in the contract's shapes
(a fake master: the real one's scheduler is not what is measured here), det-tui headless on the
job queue. Measured: the workers' time per refresh (the app's: HTTP + JSON; the queue view's:
building 10,000 rows; both off the UI thread; a job changes before every refresh, so each one
rebuilds), the UI thread's time per refresh (swap the rows in, keep the cursor), a full frame of
table rendering, key response (cursor, filter), and the process's CPU while idle: with a job
changing every refresh, and with the queue unchanged (the view then skips the rebuild).

Part 2 (chart): a real master on PostgreSQL with 1,000 trials x 10 metrics x 1,000 steps stored;
the time from opening a trial view to its chart drawn (names + downsampled series), and the
metric-series request alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # `python bench/tui_refresh.py`: make `bench` and `tui` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import statistics
import threading
import time
from typing import Any

import yaml
from flask import jsonify, request

from bench._cluster import Cluster, cluster, tar_dir
from bench._report import Row, percentile, publish
from harness.api import Client, Session
from harness.api.testing import FakeMaster
from tui.fake import FakeClient

NAME = "tui_refresh"
JOBS, AGENTS = 10_000, 100
TRIALS, METRICS, STEPS = 1_000, 10, 1_000
FRAME_TARGET_S = 0.050
CHART_TARGET_S = 0.5
IDLE_CPU_TARGET = 0.05  # of one core
HELLO = Path(__file__).resolve().parent / "trials" / "hello"


def fake_master(jobs: int, agents: int) -> FakeMaster:
    data = FakeClient.big(jobs, agents)
    fake = FakeMaster()
    app = fake.app
    app.add_url_rule(
        "/api/v1/me", "me", lambda: jsonify({"user": {"username": "admin", "admin": True}})
    )
    app.add_url_rule("/api/v1/agents", "agents", lambda: jsonify({"agents": data.agents}))
    churn = {"on": False, "n": 0}

    def queues() -> Any:
        if churn["on"]:  # one job's priority changes before every answer: the rows are rebuilt
            churn["n"] += 1
            jobs = data.pools[0]["jobs"]
            job = jobs[churn["n"] % len(jobs)]
            job["priority"] = 20 + (job["priority"] - 19) % 50  # big_job's + 1
        return jsonify({"pools": data.job_queues(request.args.get("pool"))})

    def set_churn() -> Any:
        churn["on"] = request.args.get("on") == "1"
        return jsonify(churn)

    app.add_url_rule("/api/v1/job-queues", "queues", queues)
    app.add_url_rule("/bench/churn", "churn", set_churn, methods=["POST"])
    app.add_url_rule(
        "/api/v1/experiments", "exps", lambda: jsonify({"experiments": [], "total": 0})
    )
    fake.calls = _NoCalls()  # don't keep a record of every request
    return fake


class _NoCalls(list):
    def append(self, item: Any) -> None:
        pass


async def _refresh_part(url: str) -> dict[str, Any]:
    from tui.app import DetTUI
    from tui.widgets.table import ResourceTable

    app = DetTUI(Client(Session(url, "t")), start=("queue", None), interval=1.0)
    out: dict[str, Any] = {}
    _churn(url, True)  # every refresh changes a job: each one rebuilds the rows (RowCache)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = app.screen
        end = time.monotonic() + 60
        while time.monotonic() < end and len(screen.apply_seconds) < 12:
            await asyncio.sleep(0.1)
        table = screen.query_one(ResourceTable)
        assert len(table.rows) == JOBS, f"{len(table.rows)} rows"
        out["worker_s"] = list(app.fetch_seconds)[1:]
        out["build_s"] = screen.build_seconds[1:]
        out["apply_s"] = screen.apply_seconds[1:]
        renders = []
        for _ in range(20):
            table._cache.clear()
            t0 = time.perf_counter()
            for y in range(table.size.height):
                table.render_line(y)
            renders.append(time.perf_counter() - t0)
        out["render_s"] = renders
        # key response: the action's handler plus rendering every visible line of the table
        # (what the compositor then asks for; unchanged lines come from the cache)
        actions = [("cursor", 1)] * 20 + [("page", 1)] * 10 + [("last",), ("first",)] * 5
        keys = []
        for name, *args in actions:
            t0 = time.perf_counter()
            getattr(table, f"action_{name}")(*args)
            app.screen.maybe_refresh_bindings()
            for y in range(table.size.height):
                table.render_line(y)
            keys.append(time.perf_counter() - t0)
            await pilot.pause()
        out["key_s"] = keys
        filters = []
        for text in ("sweep-4", "bob", ""):
            t0 = time.perf_counter()
            table.set_filter(text)
            for y in range(table.size.height):
                table.render_line(y)
            filters.append(time.perf_counter() - t0)
            await pilot.pause()
        out["filter_s"] = filters
        # idle: refreshing every 2 s as usual, nobody typing; first while a job changes before
        # every refresh (rows rebuilt each time), then with the queue unchanged (not rebuilt)
        app.set_refresh_interval(2.0)
        out["idle_cpu_changing"] = await _idle_cpu()
        _churn(url, False)
        skipped = screen.skipped
        out["idle_cpu"] = await _idle_cpu()
        out["refreshes_skipped"] = screen.skipped - skipped
    return out


async def _idle_cpu(seconds: float = 10.0) -> float:
    """The process's CPU (all threads) over `seconds` after a 2 s settling, in cores."""
    await asyncio.sleep(2.0)
    c0, t0 = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    return (time.process_time() - c0) / (time.monotonic() - t0)


def _churn(url: str, on: bool) -> None:
    import urllib.request

    req = urllib.request.Request(f"{url}/bench/churn?on={int(on)}", method="POST")
    with urllib.request.urlopen(req, timeout=30):
        pass


def _seed_metrics(cl: Cluster) -> tuple[int, list[int]]:
    """One experiment whose trial ran, cloned to TRIALS trials, each with STEPS x METRICS."""
    text = yaml.safe_dump(
        {
            "name": "bench-tui-chart",
            "entrypoint": "python3 trial.py",
            "hyperparameters": {},
            "searcher": {
                "name": "single",
                "metric": "loss",
                "smaller_is_better": True,
                "max_length": {"batches": 1},
            },
            "resources": {"slots_per_trial": 1},
            "max_restarts": 0,
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(cl.work / "ckpt")},
        }
    )
    exp = cl.client.create_experiment(text, tar_dir(HELLO))
    cl.wait_experiments([exp["id"]], timeout=120)
    (tid,) = [t["id"] for t in cl.client.list_experiment_trials(exp["id"])]
    cols = [
        c
        for (c,) in cl.sql(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'trials' "
            "AND column_name <> 'id' ORDER BY ordinal_position"
        )
    ]
    collist = ", ".join(f'"{c}"' for c in cols)
    uniq = {"request_id"} & set(cols)
    select = ", ".join(f"\"{c}\" || '-' || g" if c in uniq else f'"{c}"' for c in cols)
    metrics = ", ".join(f"'m{i}', random() + {i}" for i in range(METRICS))
    import psycopg2

    conn = psycopg2.connect(cl.db_url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO trials ({collist}) SELECT {select} FROM trials, "
                f"generate_series(1, %s) g WHERE id = %s",
                (TRIALS - 1, tid),
            )
            cur.execute(
                f"""INSERT INTO metrics (trial_id, "group", steps_completed, metrics, reported_at)
                    SELECT t.id, 'training', s, jsonb_build_object({metrics}), now()
                    FROM trials t, generate_series(1, %s) s WHERE t.experiment_id = %s""",
                (STEPS, exp["id"]),
            )
            cur.execute("ANALYZE metrics")
    finally:
        conn.close()
    ids = [t for (t,) in cl.sql("SELECT id FROM trials WHERE experiment_id = %s", exp["id"])]
    return exp["id"], ids


async def _chart_part(cl: Cluster, trial_ids: list[int]) -> dict[str, Any]:
    from tui.app import DetTUI
    from tui.screens.trial import TrialScreen

    names = [f"m{i}" for i in range(METRICS)]
    series, names_s = [], []
    for tid in trial_ids[:: max(1, len(trial_ids) // 10)][:10]:
        t0 = time.perf_counter()
        body = cl.client.metric_series(tid, "training", names, max_points=500)
        series.append(time.perf_counter() - t0)
        assert len(body["series"]) == METRICS and len(body["series"]["m0"]["steps"]) <= 1000
        t0 = time.perf_counter()
        cl.client.metric_names(tid)
        names_s.append(time.perf_counter() - t0)
    opens = []
    app = DetTUI(cl.client, start=("trial", trial_ids[-1]), interval=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await asyncio.sleep(1.0)  # the app's own start-up (first view, first cluster poll)
        for tid in trial_ids[: 10 * max(1, len(trial_ids) // 10) : max(1, len(trial_ids) // 10)]:
            t0 = time.perf_counter()
            screen = TrialScreen(app.ctx, tid)
            app.push_screen(screen)
            while screen.chart_seconds is None and time.perf_counter() - t0 < 10:
                await asyncio.sleep(0.002)
            opens.append(time.perf_counter() - t0)
            app.pop_screen()
            await pilot.pause()
    return {"series_10_metrics_s": series, "names_s": names_s, "open_chart_s": opens}


def serve_fake(jobs: int, agents: int) -> None:
    """`python bench/tui_refresh.py --serve`: the fake master in its own process (so serving
    10,000 jobs does not share the GIL with the TUI being measured); prints its URL."""
    fake = fake_master(jobs, agents).start()
    print(fake.url, flush=True)
    threading.Event().wait()


def run(docs: bool = True) -> bool:
    import subprocess

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        url = server.stdout.readline().strip()  # type: ignore[union-attr]
        refresh = asyncio.run(_refresh_part(url))
    finally:
        server.terminate()
        server.wait(10)
    with cluster(NAME, slots=1) as cl:
        t0 = time.monotonic()
        _exp, trial_ids = _seed_metrics(cl)
        seed_s = time.monotonic() - t0
        chart = asyncio.run(_chart_part(cl, trial_ids))
    ms = lambda v: f"{v * 1000:.1f} ms"  # noqa: E731
    med = statistics.median
    frame = max(
        med(refresh["apply_s"]) + med(refresh["render_s"]), percentile(refresh["key_s"], 95)
    )
    rows: list[Row] = [
        ("jobs / agents (GPUs)", f"{JOBS} / {AGENTS} ({AGENTS * 8})", ""),
        (
            "worker per refresh (HTTP+JSON, off the UI thread), median",
            ms(med(refresh["worker_s"])),
            "",
        ),
        ("worker per refresh, p95", ms(percentile(refresh["worker_s"], 95)), ""),
        (
            "rows built per refresh (the queue view's worker), median",
            ms(med(refresh["build_s"])),
            "",
        ),
        (
            "UI thread per refresh (swap rows, keep cursor), median",
            ms(med(refresh["apply_s"])),
            "< 50 ms",
        ),
        ("UI thread per refresh, max", ms(max(refresh["apply_s"])), ""),
        ("full table frame render (cold cache), median", ms(med(refresh["render_s"])), "< 50 ms"),
        (
            "key response (cursor, page, jump: handler + render), median",
            ms(med(refresh["key_s"])),
            "",
        ),
        ("key response, p95", ms(percentile(refresh["key_s"], 95)), "< 50 ms"),
        (
            "filter 10,000 rows (one keystroke + render), max",
            ms(max(refresh["filter_s"])),
            "< 50 ms",
        ),
        (
            "idle CPU (refresh every 2 s, queue unchanged: rows not rebuilt)",
            f"{refresh['idle_cpu'] * 100:.1f}% of a core",
            "< 5%",
        ),
        (
            "idle CPU (refresh every 2 s, a job changes each time: rows rebuilt)",
            f"{refresh['idle_cpu_changing'] * 100:.1f}% of a core",
            "",
        ),
        ("stored: trials x metrics x steps", f"{len(trial_ids)} x {METRICS} x {STEPS}", ""),
        ("seeding (SQL)", f"{seed_s:.0f} s", ""),
        (
            "metric-series, 10 metrics, 500 points, median",
            ms(med(chart["series_10_metrics_s"])),
            "",
        ),
        ("metric-names, median", ms(med(chart["names_s"])), ""),
        ("open trial -> chart drawn, median", ms(med(chart["open_chart_s"])), "< 500 ms"),
        ("open trial -> chart drawn, max", ms(max(chart["open_chart_s"])), ""),
    ]
    summary = (
        f"det-tui headless (Textual pilot) on the job queue of a fake master serving {JOBS:,} jobs "
        f"and {AGENTS} agents over HTTP; then a real master (PostgreSQL) with {TRIALS:,} trials x "
        f"{METRICS} metrics x {STEPS:,} steps stored, opening trial views until the chart is drawn."
    )
    publish(NAME, summary, rows, {"refresh": refresh, "chart": chart}, docs)
    return (
        frame < FRAME_TARGET_S
        and refresh["idle_cpu"] < IDLE_CPU_TARGET
        and statistics.median(chart["open_chart_s"]) < CHART_TARGET_S
    )


if __name__ == "__main__":
    if "--serve" in sys.argv:
        serve_fake(JOBS, AGENTS)
    else:
        sys.exit(0 if run(docs=False) else 1)
