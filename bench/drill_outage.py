"""Outage drill: the master killed with -9 under N running trials, then a PostgreSQL "restart".

    .venv/bin/python bench/drill_outage.py                         # 8 trials, 10 s, 4 s
    .venv/bin/python bench/drill_outage.py --trials 2 --steps 300 --master-outage 3 --pg-outage 2

One master (database `detlab_drill` on the local PostgreSQL, reached through a TCP proxy the
drill owns) and one process-runtime agent with N slots run N one-trial experiments of the
scripted test trial (a step every `--sleep` s, a checkpoint every 10 steps, metrics every step).
Once all train, the master is killed with SIGKILL, kept down `--master-outage` seconds and
started again; once all train again, the proxy drops every database connection and refuses new
ones for `--pg-outage` seconds (the master's view of a PostgreSQL restart, without touching the
shared server) while a client polls the API. Then everything runs to the end.

Reported (JSON on stdout and in bench/results/drill_outage-*.json):
- master: restarts used, duplicate metric rows (same trial, group and step stored twice and
  not superseded), lost acknowledged metrics (rows committed before the kill and gone after),
  orphaned checkpoint dirs (written, never registered), seconds from the master answering
  /health again to every trial's metrics advancing;
- PostgreSQL: 5xx answers the polling client saw (500s and 503s apart; 503 is the retryable
  answer), trials crashed (restarts used during it, or ended in ERROR).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import (  # noqa: E402
    RESULTS,
    TERMINAL,
    bin_path,
    database,
    free_port,
    spawn,
    stop,
    tar_dir,
    wait_for,
)
from bench._tcpproxy import TcpProxy  # noqa: E402
from harness.api import Session  # noqa: E402
from harness.api.client import Client  # noqa: E402
from tests.fixtures.scripted_config import SCRIPTED_DIR, make_config  # noqa: E402

NAME = "drill_outage"
UUID_DIR = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class Drill:
    def __init__(self, args: argparse.Namespace, db_url: str, work: Path, logs: Path) -> None:
        self.args = args
        self.db_url = db_url  # direct, for the drill's own reads
        self.work = work
        self.logs = logs
        self.ckpt_dir = work / "checkpoints"
        self.proxy = TcpProxy(("127.0.0.1", 5432)).start()
        self.proxied = db_url.replace("127.0.0.1:5432", f"127.0.0.1:{self.proxy.port}")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(12)
        self.env = {
            **os.environ,
            "DET_ADMIN_PASSWORD": self.password,
            "DET_AGENT_TOKEN": secrets.token_urlsafe(24),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.env.pop("DET_MASTER", None)
        self.master: Any = None
        self.agent: Any = None
        self.client = Client(Session(self.url))

    # ---- processes ---------------------------------------------------------------------------
    def start_master(self) -> float:
        cmd = [bin_path("det-master"), "--db", self.proxied, "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--data-dir", str(self.work / "master")]
        self.master = spawn(cmd, self.logs / "master.log", self.env)
        wait_for("master health", self.client.health, 120, [self.master])
        return time.monotonic()

    def start_agent(self) -> None:
        cmd = [bin_path("det-agent"), "--master", self.url, "--slots", str(self.args.trials)]
        cmd += ["--runtime", "process", "--data-dir", str(self.work / "master")]
        self.agent = spawn(cmd, self.logs / "agent.log", self.env)
        wait_for(
            "agent",
            lambda: any(a["state"] == "ACTIVE" for a in self.client.list_agents()),
            90,
            [self.agent],
        )

    def stop(self) -> None:
        for p in (self.agent, self.master):
            if p is not None:
                stop(p)
        self.proxy.stop()

    # ---- database reads (direct, not through the proxy) --------------------------------------
    def sql(self, query: str, *params: object) -> list[tuple]:
        conn = psycopg2.connect(self.db_url)
        try:
            with conn.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall()
        finally:
            conn.close()

    def max_steps(self) -> dict[int, int]:
        rows = self.sql(
            "SELECT t.id, COALESCE(MAX(m.steps_completed), 0) FROM trials t "
            "LEFT JOIN metrics m ON m.trial_id = t.id AND NOT m.superseded "
            "WHERE t.state NOT IN ('COMPLETED', 'ERROR', 'CANCELED') GROUP BY t.id"
        )
        return {int(t): int(s) for t, s in rows}

    def restarts(self) -> int:
        return int(self.sql("SELECT COALESCE(SUM(restarts), 0) FROM trials")[0][0])

    def errored(self) -> int:
        return int(self.sql("SELECT COUNT(*) FROM trials WHERE state = 'ERROR'")[0][0])

    def wait_training(self, at_least: dict[int, int], timeout: float) -> float:
        """Until every live trial reported past `at_least`; returns when (monotonic)."""

        def advanced() -> bool:
            now = self.max_steps()
            return all(now.get(t, 1 << 62) > s for t, s in at_least.items() if t in now)

        wait_for("training advancing", advanced, timeout, [self.agent])
        return time.monotonic()

    # ---- phases ------------------------------------------------------------------------------
    def submit(self) -> list[int]:
        config = make_config(
            self.ckpt_dir,
            batches=self.args.steps,
            hparams={"sleep": self.args.sleep, "checkpoint_every": 10},
            checkpoint_storage={"save_trial_latest": 1000, "save_experiment_best": 1000},
            max_restarts=5,
        )
        model = tar_dir(SCRIPTED_DIR)
        n = self.args.trials
        return [int(self.client.create_experiment(config, model)["id"]) for _ in range(n)]

    def master_kill(self) -> dict[str, Any]:
        live = self.max_steps()
        self.wait_training({t: 10 for t in live}, 180)
        restarts0 = self.restarts()
        acked = {r[0] for r in self.sql("SELECT id FROM metrics")}  # committed: acknowledged
        self.master.send_signal(signal.SIGKILL)
        self.master.wait()
        time.sleep(self.args.master_outage)  # the outage itself: what the drill is about
        healthy = self.start_master()
        resumed = self.wait_training(self.max_steps(), 300)
        after = {r[0] for r in self.sql("SELECT id FROM metrics")}
        return {
            "master_outage_s": self.args.master_outage,
            "restarts_used": self.restarts() - restarts0,
            "lost_acknowledged_metrics": len(acked - after),
            "healthy_to_training_resumed_s": round(resumed - healthy, 2),
        }

    def pg_restart(self) -> dict[str, Any]:
        self.wait_training(self.max_steps(), 180)
        restarts0, errored0 = self.restarts(), self.errored()
        seen: dict[int, int] = {}
        stop_polling = threading.Event()
        token = self.client.session.token

        def poll() -> None:
            s = requests.Session()
            headers = {"Authorization": f"Bearer {token}"}
            while not stop_polling.is_set():
                for path in ("/experiments", "/agents", "/job-queues"):
                    try:
                        r = s.get(f"{self.url}/api/v1{path}", headers=headers, timeout=30)
                        seen[r.status_code] = seen.get(r.status_code, 0) + 1
                    except requests.RequestException:
                        seen[-1] = seen.get(-1, 0) + 1
                stop_polling.wait(0.05)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        self.proxy.outage()
        time.sleep(self.args.pg_outage)  # the outage itself
        self.proxy.restore()
        back = time.monotonic()
        resumed = self.wait_training(self.max_steps(), 300)
        stop_polling.set()
        poller.join()
        return {
            "pg_outage_s": self.args.pg_outage,
            "client_answers": {str(k): v for k, v in sorted(seen.items())},
            "client_500s": sum(v for k, v in seen.items() if k == 500),
            "client_503s": seen.get(503, 0),
            "client_5xx_other": sum(v for k, v in seen.items() if k >= 500 and k not in (500, 503)),
            "trials_crashed": (self.restarts() - restarts0) + (self.errored() - errored0),
            "db_back_to_training_resumed_s": round(resumed - back, 2),
        }

    def totals(self, exp_ids: list[int]) -> dict[str, Any]:
        states = {i: self.client.get_experiment(i)["state"] for i in exp_ids}
        dup = self.sql(
            "SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM metrics "
            'WHERE NOT superseded GROUP BY trial_id, "group", steps_completed) s'
        )[0][0]
        superseded = self.sql("SELECT COUNT(*) FROM metrics WHERE superseded")[0][0]
        registered = {r[0] for r in self.sql("SELECT uuid FROM checkpoints")}
        on_disk = (
            {p.name for p in self.ckpt_dir.iterdir() if p.is_dir() and UUID_DIR.match(p.name)}
            if self.ckpt_dir.exists()
            else set()
        )
        missing = self.sql(
            "SELECT COUNT(*) FROM trials t, generate_series(1, %s) AS s(step) WHERE NOT EXISTS "
            "(SELECT 1 FROM metrics m WHERE m.trial_id = t.id AND m.\"group\" = 'training' "
            "AND m.steps_completed = s.step AND NOT m.superseded)",
            self.args.steps,
        )[0][0]
        return {
            "experiments": {str(k): v for k, v in states.items()},
            "restarts_total": self.restarts(),
            "duplicate_metric_rows": int(dup),
            "superseded_metric_rows": int(superseded),
            "missing_training_steps": int(missing),
            "orphaned_checkpoint_dirs": len(on_disk - registered),
            "unhandled_errors_in_master_log": _count(self.logs / "master.log", "unhandled error"),
        }


def _count(path: Path, needle: str) -> int:
    try:
        return path.read_text(errors="replace").count(needle)
    except OSError:
        return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / "work" / f"{NAME}-{stamp}"
    logs = RESULTS / "logs" / f"{NAME}-{stamp}"
    work.mkdir(parents=True)
    with database("detlab_drill") as db_url:
        drill = Drill(args, db_url, work, logs)
        try:
            drill.start_master()
            drill.client.login("admin", drill.password)
            drill.start_agent()
            exp_ids = drill.submit()
            report: dict[str, Any] = {"trials": args.trials, "steps": args.steps}
            report["master_kill_9"] = drill.master_kill()
            report["postgres_restart"] = drill.pg_restart()
            end = time.monotonic() + 600
            while time.monotonic() < end:
                if all(drill.client.get_experiment(i)["state"] in TERMINAL for i in exp_ids):
                    break
                time.sleep(0.5)
            report["totals"] = drill.totals(exp_ids)
            report["logs"] = str(logs)
            return report
        finally:
            drill.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=600, help="steps per trial")
    parser.add_argument("--sleep", type=float, default=0.1, help="seconds per step")
    parser.add_argument("--master-outage", type=float, default=10.0)
    parser.add_argument("--pg-outage", type=float, default=4.0)
    args = parser.parse_args()
    report = run(args)
    out = RESULTS / f"{NAME}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    t = report["totals"]
    ok = (
        report["master_kill_9"]["restarts_used"] == 0
        and report["master_kill_9"]["lost_acknowledged_metrics"] == 0
        and t["duplicate_metric_rows"] == 0
        and t["orphaned_checkpoint_dirs"] == 0
        and report["postgres_restart"]["client_500s"] == 0
        and report["postgres_restart"]["trials_crashed"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
