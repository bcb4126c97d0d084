"""metrics_ingest: training-metric reports persisted per second, detlab vs. an MLflow server.

16 concurrent trials (real experiments, real `harness.core.init()`) each report R training
metrics of 4 values through `core.train.report_training_metrics` as fast as they can, all
starting together at a file barrier. Throughput = reports / (first start -> last flushed end);
the rows in the `metrics` table are counted afterwards (nothing may be lost). Then the same load
(same processes, same number of reports, same deadline) against an MLflow tracking server on
PostgreSQL (`MlflowClient.log_batch`, 1000 metric values per call), in both of MLflow's modes:
synchronous, and asynchronous (`synchronous=False`, which like detlab's shipper does not block the
training loop; timed until every batch is acknowledged). The headline is the ratio measured in the
same run: the absolute rate depends on the CPU.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import _mlflow
from bench._cluster import Cluster, cluster, tar_dir
from bench._report import Row, publish

NAME = "metrics_ingest"
TARGET_PER_S = 50_000
MODES = ("sync", "async")
REPORTER = Path(__file__).resolve().parent / "trials" / "reporter"


def config(storage: Path, reports: int, barrier: Path, deadline_s: float) -> str:
    return yaml.safe_dump(
        {
            "name": "bench-metrics-ingest",
            "entrypoint": "python3 trial.py",
            "hyperparameters": {
                "reports": reports,
                "barrier_dir": str(barrier),
                "deadline_s": deadline_s,
            },
            "searcher": {
                "name": "single",
                "metric": "loss",
                "smaller_is_better": True,
                "max_length": {"batches": 1},
            },
            "resources": {"slots_per_trial": 1},
            "max_restarts": 0,
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        }
    )


def wait_files(barrier: Path, prefix: str, count: int, timeout: float) -> list[Path]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = sorted(barrier.glob(f"{prefix}*"))
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise TimeoutError(f"only {len(list(barrier.glob(prefix + '*')))}/{count} {prefix!r} files")


def detlab(cl: Cluster, procs: int, reports: int, deadline_s: float) -> dict[str, Any]:
    barrier = Path(tempfile.mkdtemp(prefix="detlab-bench-"))
    text = config(cl.work / "checkpoints", reports, barrier, deadline_s)
    model = tar_dir(REPORTER)
    exp_ids = [cl.client.create_experiment(text, model)["id"] for _ in range(procs)]
    wait_files(barrier, "ready-", procs, timeout=90)
    (barrier / "go").touch()
    states = cl.wait_experiments(exp_ids, timeout=deadline_s + 60)
    results = [json.loads(p.read_text()) for p in wait_files(barrier, "result-", procs, 10)]
    trial_ids = [r["trial_id"] for r in results]
    (persisted,) = cl.sql(
        'SELECT count(*) FROM metrics WHERE "group" = %s AND trial_id = ANY(%s)',
        "training",
        trial_ids,
    )[0]
    sent = sum(r["reports"] for r in results)
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "processes": procs,
        "sent": sent,
        "persisted": persisted,
        "elapsed_s": elapsed,
        "per_s": persisted / elapsed,
        "states": states,
        "per_process": results,
    }


def run(
    procs: int = 16,
    reports: int = 10_000,
    deadline_s: float = 60.0,
    mlflow: bool = True,
    docs: bool = True,
) -> bool:
    """Run the benchmark; True when detlab meets the target and lost nothing."""
    with cluster(NAME, slots=procs) as cl:
        ours = detlab(cl, procs, reports, deadline_s)
    print(
        f"  detlab: {ours['persisted']:,} of {ours['sent']:,} reports persisted in "
        f"{ours['elapsed_s']:.2f} s = {ours['per_s']:,.0f}/s",
        flush=True,
    )
    # The same deadline and the same number of reports on both sides, MLflow in both its modes.
    theirs = {m: _mlflow.run(procs, reports, deadline_s, m) for m in MODES} if mlflow else {}

    rows: list[Row] = []
    for mode, t in theirs.items():
        complete = t["sent"] == procs * reports
        rows.append(
            (
                f"detlab / MLflow {mode} (same run)",
                f"{ours['per_s'] / t['per_s']:.2f}x",
                "" if complete else f"MLflow sent {t['sent']:,} of {procs * reports:,}",
            )
        )
    rows += [
        ("detlab reports sent", f"{ours['sent']:,}", f"{procs} x {reports:,}"),
        ("detlab reports persisted", f"{ours['persisted']:,}", "= sent"),
        ("detlab elapsed (first start -> last flush)", f"{ours['elapsed_s']:.2f} s", ""),
        ("detlab reports/s persisted (this CPU)", f"{ours['per_s']:,.0f}", f">= {TARGET_PER_S:,}"),
    ]
    for mode, t in theirs.items():
        rows += [
            (f"MLflow {mode} reports persisted", f"{t['persisted']:,}", f"of {t['sent']:,}"),
            (f"MLflow {mode} elapsed", f"{t['elapsed_s']:.2f} s", ""),
            (f"MLflow {mode} reports/s persisted (this CPU)", f"{t['per_s']:,.0f}", ""),
        ]
    version = next(iter(theirs.values()))["version"] if theirs else "MLflow (skipped)"
    summary = (
        f"{procs} concurrent processes each report up to {reports:,} training reports of 4 metric "
        f"values as fast as they can, with the same {deadline_s:.0f} s deadline on every side "
        "(detlab: real trials through the Core API, process runtime, master on PostgreSQL; "
        f"{version}: `mlflow server` on PostgreSQL, `MlflowClient.log_batch` with 1000 values "
        "per call, synchronous and asynchronous (`synchronous=False`, 2 batches in flight per "
        "process so the server's database pool holds them all, timed until every batch is "
        "acknowledged)). A report = one step's 4 values; throughput counts the rows found in "
        "the database afterwards. The ratios are the headline: the absolute rates depend on the "
        "CPU."
    )
    publish(NAME, summary, rows, {"detlab": ours, "mlflow": theirs}, docs)
    return ours["per_s"] >= TARGET_PER_S and ours["persisted"] == ours["sent"]
