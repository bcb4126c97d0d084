"""Run detlab's benchmarks, print their tables and refresh docs/benchmarks.md.

    .venv/bin/python bench/run.py                      # every benchmark
    .venv/bin/python bench/run.py submit_latency       # some of them
    .venv/bin/python bench/run.py metrics_ingest --no-mlflow --no-docs

Each benchmark starts its own master (PostgreSQL database `detlab_bench`, dropped afterwards)
and agent on free ports, and is bounded to a few minutes. Exit code 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench` and the harness

from bench import (  # noqa: E402
    agent_load,
    checkpoint_transfer,
    device_throughput,
    docker_start,
    drill_clients,
    isolation_cost,
    metrics_ingest,
    notebook_start,
    provisioner_cost,
    provisioner_decision,
    provisioner_latency,
    proxy_overhead,
    quickstart_time,
    scheduler_pass,
    search_efficiency,
    slurm_submit,
    submit_latency,
    trial_overhead,
    trial_throughput,
    tui_refresh,
    web_pages,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchmarks: dict[str, Callable[[argparse.Namespace], bool]] = {
        submit_latency.NAME: lambda a: submit_latency.run(n=a.submissions, docs=a.docs),
        slurm_submit.NAME: lambda a: slurm_submit.run(n=a.slurm_rounds, docs=a.docs),
        metrics_ingest.NAME: lambda a: metrics_ingest.run(
            procs=a.processes, reports=a.reports, mlflow=a.mlflow, docs=a.docs
        ),
        tui_refresh.NAME: lambda a: tui_refresh.run(docs=a.docs),
        trial_throughput.NAME: lambda a: trial_throughput.run(rounds=a.rounds, docs=a.docs),
        device_throughput.NAME: lambda a: device_throughput.run(
            device=a.device, rounds=a.device_rounds, docs=a.docs
        ),
        docker_start.NAME: lambda a: docker_start.run(n=a.docker_submissions, docs=a.docs),
        agent_load.NAME: lambda a: agent_load.run(docs=a.docs),
        search_efficiency.NAME: lambda a: search_efficiency.run(
            seeds=a.seeds,
            objectives=a.objectives,
            optuna=a.optuna,
            docs=a.docs,
            first_seed=a.first_seed,
        ),
        trial_overhead.NAME: lambda a: trial_overhead.run(n=a.trials, ray=a.ray, docs=a.docs),
        isolation_cost.NAME: lambda a: isolation_cost.run(
            pairs=a.isolation_pairs,
            trials=a.isolation_trials,
            submit_pairs=a.isolation_submit_pairs,
            docs=a.docs,
        ),
        scheduler_pass.NAME: lambda a: scheduler_pass.run(passes=a.passes, docs=a.docs),
        checkpoint_transfer.NAME: lambda a: checkpoint_transfer.run(
            big_mb=a.big_mb,
            small_count=a.small_count,
            small_kb=a.small_kb,
            rounds=a.transfer_rounds,
            docs=a.docs,
        ),
        web_pages.NAME: lambda a: web_pages.run(mlflow=a.mlflow, docs=a.docs),
        provisioner_decision.NAME: lambda a: provisioner_decision.run(passes=a.passes, docs=a.docs),
        provisioner_cost.NAME: lambda a: provisioner_cost.run(docs=a.docs),
        provisioner_latency.NAME: lambda a: provisioner_latency.run(n=a.launches, docs=a.docs),
        quickstart_time.NAME: lambda a: quickstart_time.run(reuse_venv=a.reuse_venv, docs=a.docs),
        notebook_start.NAME: lambda a: notebook_start.run(rounds=a.notebook_rounds, docs=a.docs),
        proxy_overhead.NAME: lambda a: proxy_overhead.run(docs=a.docs),
        drill_clients.NAME: lambda a: drill_clients.run(
            clients=a.clients, seconds=a.drill_seconds, model_mb=a.model_mb, docs=a.docs
        ),
    }
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"{', '.join(benchmarks)} (default: all)"
    )
    parser.add_argument(
        "--no-docs", dest="docs", action="store_false", help="do not touch docs/benchmarks.md"
    )
    parser.add_argument("--submissions", type=int, default=50, help="submit_latency: N")
    parser.add_argument("--slurm-rounds", type=int, default=10, help="slurm_submit: rounds")
    parser.add_argument("--docker-submissions", type=int, default=20, help="docker_start: N")
    parser.add_argument("--processes", type=int, default=16, help="metrics_ingest: processes")
    parser.add_argument(
        "--reports", type=int, default=10_000, help="metrics_ingest: reports per process"
    )
    parser.add_argument("--launches", type=int, default=20, help="provisioner_latency: N launches")
    parser.add_argument("--passes", type=int, default=30, help="scheduler_pass: passes per policy")
    parser.add_argument(
        "--no-mlflow",
        dest="mlflow",
        action="store_false",
        help="metrics_ingest: skip the MLflow comparison",
    )
    parser.add_argument("--seeds", type=int, default=10, help="search_efficiency: seeds")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help=(
            "search_efficiency: the first seed (for a part of a longer run; "
            "record the parts' raw files together)"
        ),
    )
    parser.add_argument(
        "--objectives",
        type=lambda v: v.split(","),
        default=None,
        help="search_efficiency: comma-separated objectives (default: all)",
    )
    parser.add_argument(
        "--no-optuna",
        dest="optuna",
        action="store_false",
        help="search_efficiency: skip the Optuna comparison",
    )
    parser.add_argument("--trials", type=int, default=1000, help="trial_overhead: N trials")
    parser.add_argument(
        "--no-ray", dest="ray", action="store_false", help="trial_overhead: skip Ray Tune"
    )
    parser.add_argument("--rounds", type=int, default=15, help="trial_throughput: rounds per side")
    parser.add_argument(
        "--isolation-pairs", type=int, default=8, help="isolation_cost: trial_overhead pairs"
    )
    parser.add_argument(
        "--isolation-trials", type=int, default=10, help="isolation_cost: trials a side a pair"
    )
    parser.add_argument(
        "--isolation-submit-pairs", type=int, default=20, help="isolation_cost: submission pairs"
    )
    parser.add_argument("--device", help="device_throughput: cuda (default when present) or cpu")
    parser.add_argument("--device-rounds", type=int, default=7, help="device_throughput: rounds")
    parser.add_argument("--big-mb", type=int, default=1024, help="checkpoint_transfer: big file")
    parser.add_argument("--small-count", type=int, default=1000, help="checkpoint_transfer")
    parser.add_argument("--small-kb", type=int, default=1024, help="checkpoint_transfer")
    parser.add_argument(
        "--transfer-rounds", type=int, default=3, help="checkpoint_transfer: paired rounds"
    )
    parser.add_argument(
        "--reuse-venv", metavar="PATH", help="quickstart_time: link this venv, skip the install"
    )
    parser.add_argument("--notebook-rounds", type=int, default=3, help="notebook_start: rounds")
    parser.add_argument("--clients", type=int, default=200, help="drill_clients: clients")
    parser.add_argument(
        "--drill-seconds", type=float, default=60.0, help="drill_clients: seconds of load"
    )
    parser.add_argument(
        "--model-mb", type=float, default=95.0, help="drill_clients: model definition size"
    )
    args = parser.parse_args()
    unknown = set(args.names) - set(benchmarks)
    if unknown:
        parser.error(
            f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(benchmarks)}"
        )

    met: dict[str, bool | None] = {}
    for name in args.names or list(benchmarks):
        t0 = time.monotonic()
        print(f"--- {name}", flush=True)
        try:
            met[name] = benchmarks[name](args)
        except Exception as e:  # one failing benchmark should not hide the others
            print(f"{name} failed: {type(e).__name__}: {e}", file=sys.stderr)
            met[name] = None
        print(f"--- {name}: {time.monotonic() - t0:.0f} s", flush=True)
    for name, ok in met.items():
        print(f"{name}: {'target met' if ok else 'FAILED' if ok is None else 'target missed'}")
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
