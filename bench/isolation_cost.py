"""isolation_cost: what trial isolation costs, isolated vs `--shared-unisolated`, paired.

One master (PostgreSQL) with two resource pools, each with one process-runtime agent of 2 slots
on this machine: `isolated` (the default: each user's trials as their own Unix identity, with a
/proc of their own) and `shared` (`--shared-unisolated`: every trial as the agent). The two
sides run alternately, in A/B pairs whose order flips every pair, so that the machine's load
(other people's test runs) falls on both sides alike and cancels out of each pair's difference.

- trial_overhead pairs: a random search of K trivial trials (10 reports + 1 validation each, 2
  at a time) on each side; the figure is wall time from the experiment's creation to COMPLETED
  over K.
- submit_latency pairs: one submission of a one-line trial on each side; the figure is submit
  -> first output line read through the logs API.

Reported: each side's median, and the paired difference (isolated - shared) as its mean with
its standard error (sample standard deviation of the differences over sqrt(pairs)), with the
load average (1 min) before, during and after.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from bench import submit_latency, trial_overhead
from bench._cluster import RESULTS, Cluster, bin_path, database, free_port, spawn, stop, wait_for
from bench._cluster import tar_dir as tar
from bench._report import Row, publish
from harness.api import Session
from harness.api.client import Client

NAME = "isolation_cost"
SIDES = ("isolated", "shared")
AGENT_ARGS = {"isolated": [], "shared": ["--shared-unisolated"]}
MASTER_YAML = "resource_pools:\n  - name: isolated\n  - name: shared\n"


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@contextlib.contextmanager
def two_pool_cluster(slots: int = 2) -> Iterator[Cluster]:
    """A master with pools `isolated` and `shared`, one agent in each (as bench/_cluster.py)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work, logs = RESULTS / "work" / f"{NAME}-{stamp}", RESULTS / "logs" / f"{NAME}-{stamp}"
    work.mkdir(parents=True)
    (work / "master.yaml").write_text(MASTER_YAML)
    password = secrets.token_urlsafe(12)
    env = {
        **os.environ,
        "DET_ADMIN_PASSWORD": password,
        "DET_AGENT_TOKEN": secrets.token_urlsafe(24),
        "PATH": f"{Path(bin_path('det-master')).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("DET_MASTER", None)
    url = f"http://127.0.0.1:{free_port()}"
    # A database of its own: other worktrees' benchmarks drop `detlab_bench` WITH (FORCE).
    with database(f"detlab_bench_{NAME}_{os.getpid()}") as db_url:
        procs = []
        try:
            cmd = [bin_path("det-master"), "--db", db_url, "--host", "127.0.0.1"]
            cmd += ["--port", url.rsplit(":", 1)[1], "--data-dir", str(work / "master")]
            cmd += ["--config", str(work / "master.yaml")]
            procs.append(spawn(cmd, logs / "master.log", env))
            client = Client(Session(url))
            wait_for("master health", lambda: client.health(), 60, procs)
            client.login("admin", password)
            for side in SIDES:
                cmd = [bin_path("det-agent"), "--master", url, "--slots", str(slots)]
                cmd += ["--agent-id", f"agent-{side}", "--resource-pool", side]
                cmd += ["--runtime", "process", "--data-dir", str(work / f"data-{side}")]
                cmd += ["--work-dir", str(work / f"work-{side}"), *AGENT_ARGS[side]]
                procs.append(spawn(cmd, logs / f"agent-{side}.log", env))
            wait_for(
                "both agents",
                lambda: sum(a["state"] == "ACTIVE" for a in client.list_agents()) == 2,
                60,
                procs,
            )
            yield Cluster(url, db_url, client, work, logs, procs)
        finally:
            for p in reversed(procs):
                stop(p)
            shutil.rmtree(work, ignore_errors=True)


def in_pool(text: str, pool: str) -> str:
    conf = yaml.safe_load(text)
    conf.setdefault("resources", {})["resource_pool"] = pool
    return yaml.safe_dump(conf)


def trial_batch(cl: Cluster, pool: str, k: int) -> float:
    """Seconds per trial of a K-trial random search in `pool` (created -> COMPLETED, over K)."""
    text = in_pool(trial_overhead.config(cl.work / "checkpoints", k), pool)
    t0 = time.monotonic()
    exp_id = cl.client.create_experiment(text, tar(trial_overhead.TRIVIAL))["id"]
    state = cl.wait_experiments([exp_id], timeout=max(120.0, k * 10.0))[exp_id]
    if state != "COMPLETED":
        raise RuntimeError(f"{NAME}: experiment {exp_id} in pool {pool} ended {state}")
    return (time.monotonic() - t0) / k


def submission(cl: Cluster, pool: str) -> float:
    """Submit -> first output line seen, for one one-line trial in `pool`."""
    text = in_pool(submit_latency.config(cl.work / "checkpoints"), pool)
    sample = submit_latency.one(cl, text, tar(submit_latency.HELLO))
    if sample["state"] != "COMPLETED":
        raise RuntimeError(f"{NAME}: a submission in pool {pool} ended {sample['state']}")
    return float(sample["client_s"])


def paired(samples: list[dict[str, float]]) -> dict[str, float]:
    """Medians per side and the paired difference's mean and standard error."""
    diffs = [s["isolated"] - s["shared"] for s in samples]
    n = len(diffs)
    se = statistics.stdev(diffs) / math.sqrt(n) if n >= 2 else float("nan")
    shared_mean = statistics.fmean(s["shared"] for s in samples)
    return {
        "pairs": n,
        "isolated_median": statistics.median(s["isolated"] for s in samples),
        "shared_median": statistics.median(s["shared"] for s in samples),
        "diff_mean": statistics.fmean(diffs),
        "diff_se": se,
        "diff_rel": statistics.fmean(diffs) / shared_mean if shared_mean else float("nan"),
    }


def run_pairs(fn: Any, pairs: int, label: str) -> list[dict[str, float]]:
    out = []
    for i in range(pairs):
        order = SIDES if i % 2 == 0 else SIDES[::-1]
        sample: dict[str, float] = {"load1": load1()}
        for side in order:
            sample[side] = fn(side)
        out.append(sample)
        print(
            f"  {label} pair {i + 1}/{pairs} ({order[0]} first): isolated "
            f"{sample['isolated'] * 1000:.0f} ms, shared {sample['shared'] * 1000:.0f} ms, "
            f"load {sample['load1']:.1f}",
            flush=True,
        )
    return out


def run(pairs: int = 8, trials: int = 10, submit_pairs: int = 20, docs: bool = True) -> bool:
    """Run the benchmark; True when every trial completed (there is no target to meet)."""
    loads = [load1()]
    with two_pool_cluster() as cl:
        for side in SIDES:  # warm-up: the warm-start servers, the caches (not counted)
            trial_batch(cl, side, 2)
            submission(cl, side)
        overhead = run_pairs(lambda side: trial_batch(cl, side, trials), pairs, "trial_overhead")
        loads.append(load1())
        latency = run_pairs(lambda side: submission(cl, side), submit_pairs, "submit_latency")
        loads.append(load1())
    o, s = paired(overhead), paired(latency)
    ms = lambda v: f"{v * 1000:.0f} ms"  # noqa: E731
    pm = lambda r: f"{r['diff_mean'] * 1000:+.0f} ms ± {r['diff_se'] * 1000:.0f} ms"  # noqa: E731
    rel = lambda r: f"{r['diff_rel'] * 100:+.1f} %"  # noqa: E731
    rows: list[Row] = [
        (f"trial_overhead pairs ({trials} trials a side each)", str(o["pairs"]), ""),
        ("trial_overhead wall time / trial, isolated, median", ms(o["isolated_median"]), ""),
        ("trial_overhead wall time / trial, shared, median", ms(o["shared_median"]), ""),
        ("trial_overhead isolated - shared, mean ± SE", pm(o), rel(o)),
        ("submit_latency pairs (one submission a side each)", str(s["pairs"]), ""),
        ("submit -> first line, isolated, median", ms(s["isolated_median"]), ""),
        ("submit -> first line, shared, median", ms(s["shared_median"]), ""),
        ("submit_latency isolated - shared, mean ± SE", pm(s), rel(s)),
        (
            "load average (1 min): start / after overhead / end",
            " / ".join(f"{x:.1f}" for x in loads),
            "",
        ),
    ]
    summary = (
        "The cost of trial isolation, measured as paired differences: one master with two "
        "pools, each with a 2-slot process-runtime agent on this machine, one isolated (the "
        "default: each user's trials as their own Unix identity with a /proc of their own) and "
        "one `--shared-unisolated`; the sides alternate in A/B pairs whose order flips every "
        "pair, so the machine's load falls on both alike. trial_overhead: a random search of "
        f"{trials} trivial trials a side per pair, (created -> COMPLETED) / {trials}; "
        "submit_latency: one one-line trial a side per pair, submit -> first line read through "
        "the logs API. The difference's ± is its standard error over the pairs (the relative "
        "figure is against the shared side's mean)."
    )
    raw = {"trial_overhead": overhead, "submit_latency": latency, "loads": loads}
    publish(NAME, summary, rows, {**raw, "summary": {"overhead": o, "latency": s}}, docs)
    return True
