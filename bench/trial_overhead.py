"""trial_overhead: wall time per trivial trial through the whole loop, detlab vs Ray Tune.

One experiment, `searcher: {name: random, max_trials: N, max_concurrent_trials: 2,
max_length: {batches: 10}}`, on one process-runtime agent with 2 slots (master on PostgreSQL):
searcher -> queue -> agent -> process -> 10 training reports + 1 validation -> completion, N
times. Figures: (experiment created -> COMPLETED) / N (start-up included); the rate after
start-up, (N - 1) / (first trial end -> last trial end); and the per-trial latency (a trial's
creation -> its end, median and p95), which is not the same thing as throughput at 2 slots.
Afterwards the database is checked: N trials COMPLETED, 10 training and 1 validation report each.

Ray Tune (installed into `bench/.venv-ray`, kept apart from detlab's dependencies; skipped with
the reason when it cannot be installed): a function trainable reporting 10 times, the SAME N
samples of the same random search, 2 concurrent trials on a 2-CPU local Ray; `Tuner.fit()` wall
time / N when all N finished, and the same after-start-up rate from the trials' own end times.
The comparison row uses the after-start-up rates (like with like even when Ray's time budget cut
it short, which the table then says). No peer figure is typed in: every Ray number is measured.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench._cluster import Cluster, cluster, tar_dir
from bench._report import Row, percentile, publish

NAME = "trial_overhead"
TARGET_S = 0.2
REPORTS = 10
TRIVIAL = Path(__file__).resolve().parent / "trials" / "trivial"
BENCH = Path(__file__).resolve().parent
RAY_VENV = BENCH / ".venv-ray"
RAY_PACKAGES = ["ray[tune]"]
RAY_BUDGET_PER_TRIAL_S = 3.0  # Ray's time budget: generous, so that it runs all N trials

RAY_SCRIPT = r"""
import json, os, sys, tempfile, time
n, budget = int(sys.argv[1]), float(sys.argv[2])
import ray
from ray import tune
report = getattr(tune, "report", None)
if report is None:
    from ray.train import report

def trivial(config):
    t_start = time.time()
    for step in range(1, 11):
        report({"loss": config["x"] + 1.0 / step, "t_start": t_start, "t_end": time.time()})

RunConfig = getattr(tune, "RunConfig", None)
if RunConfig is None:
    from ray.train import RunConfig
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
storage = tempfile.mkdtemp(prefix="ray-bench-")
tuner = tune.Tuner(
    trivial,
    param_space={"x": tune.uniform(0.0, 1.0)},
    tune_config=tune.TuneConfig(
        num_samples=n, max_concurrent_trials=2, metric="loss", mode="min", time_budget_s=budget
    ),
    run_config=RunConfig(storage_path=storage, verbose=0),
)
t0 = time.perf_counter()
results = tuner.fit()
elapsed = time.perf_counter() - t0
finished = [r.metrics for r in results if r.metrics and r.metrics.get("training_iteration") == 10]
print("RESULT " + json.dumps({
    "version": ray.__version__, "trials": n, "completed": len(finished), "elapsed_s": elapsed,
    "errors": len(results.errors),
    "ends": sorted(m["t_end"] for m in finished),
    "in_function_s": sorted(m["t_end"] - m["t_start"] for m in finished),
}))
ray.shutdown()
"""


def config(storage: Path, n: int) -> str:
    return yaml.safe_dump(
        {
            "name": "bench-trial-overhead",
            "entrypoint": "python3 trial.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
            "searcher": {
                "name": "random",
                "metric": "loss",
                "smaller_is_better": True,
                "max_trials": n,
                "max_concurrent_trials": 2,
                "max_length": {"batches": REPORTS},
            },
            "resources": {"slots_per_trial": 1},
            "max_restarts": 0,
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        }
    )


def detlab(cl: Cluster, n: int, timeout_s: float) -> dict[str, Any]:
    text, model = config(cl.work / "checkpoints", n), tar_dir(TRIVIAL)
    t0 = time.monotonic()
    exp_id = cl.client.create_experiment(text, model)["id"]
    state = cl.wait_experiments([exp_id], timeout=timeout_s)[exp_id]
    elapsed = time.monotonic() - t0
    states = dict(
        cl.sql("SELECT state, count(*) FROM trials WHERE experiment_id = %s GROUP BY state", exp_id)
    )
    reports = dict(
        cl.sql(
            'SELECT m."group", count(*) FROM metrics m JOIN trials t ON t.id = m.trial_id '
            'WHERE t.experiment_id = %s GROUP BY m."group"',
            exp_id,
        )
    )
    (span,) = cl.sql(
        "SELECT extract(epoch FROM max(t.ended_at) - e.created_at) FROM trials t "
        "JOIN experiments e ON e.id = t.experiment_id WHERE e.id = %s GROUP BY e.created_at",
        exp_id,
    )
    ends = [float(e) for (e,) in cl.sql(
        "SELECT extract(epoch FROM ended_at) FROM trials WHERE experiment_id = %s "
        "AND ended_at IS NOT NULL ORDER BY ended_at", exp_id,
    )]  # fmt: skip
    latency = [float(v) for (v,) in cl.sql(
        "SELECT extract(epoch FROM ended_at - created_at) FROM trials WHERE experiment_id = %s "
        "AND ended_at IS NOT NULL", exp_id,
    )]  # fmt: skip
    phases = cl.sql(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - "
        "t.created_at)), percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM "
        "a.ended_at - a.started_at)), percentile_cont(0.5) WITHIN GROUP (ORDER BY "
        "extract(epoch FROM t.ended_at - a.ended_at)) FROM trials t JOIN allocations a "
        "ON a.trial_id = t.id WHERE t.experiment_id = %s",
        exp_id,
    )[0]
    return {
        "experiment_id": exp_id,
        "median_created_to_started_s": phases[0],
        "median_started_to_ended_s": phases[1],
        "median_allocation_end_to_trial_end_s": phases[2],
        "state": state,
        "trials": n,
        "elapsed_s": elapsed,
        "per_trial_s": elapsed / n,
        "server_span_s": float(span[0]) if span[0] is not None else None,
        "trial_states": states,
        "reports": reports,
        "after_startup_per_trial_s": after_startup(ends),
        "latency_median_s": statistics.median(latency) if latency else None,
        "latency_p95_s": percentile(latency, 95) if latency else None,
    }


def after_startup(ends: list[float]) -> float | None:
    """Seconds per trial after start-up: (first end -> last end) / (trials ended after it)."""
    ends = sorted(ends)
    return (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) >= 2 else None


def ensure_ray() -> tuple[Path | None, str]:
    """bench/.venv-ray's python with Ray Tune, or None and why not."""
    python = RAY_VENV / "bin" / "python"
    check = [str(python), "-c", "import ray.tune, ray; print(ray.__version__)"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, ""
    base = shutil.which("python3.11") or sys.executable
    where = RAY_VENV.relative_to(BENCH.parent)
    print(f"  creating {where} and installing {' '.join(RAY_PACKAGES)}", flush=True)
    try:
        subprocess.run([base, "-m", "venv", "--clear", str(RAY_VENV)], check=True)
        out = subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            + RAY_PACKAGES,
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"cannot create the Ray venv: {e}"
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return None, "pip install ray[tune] failed: " + " | ".join(tail)
    return python, ""


def ray_tune(n: int, budget_s: float) -> dict[str, Any]:
    python, why = ensure_ray()
    if python is None:
        return {"skipped": why}
    with tempfile.TemporaryDirectory(prefix="ray-tmp-") as tmp:
        try:
            out = subprocess.run(
                [str(python), "-c", RAY_SCRIPT, str(n), str(budget_s)],
                capture_output=True,
                text=True,
                timeout=budget_s + 240,
                env={"PATH": "/usr/bin:/bin", "HOME": tmp, "RAY_TMPDIR": tmp, "TMPDIR": tmp},
            )
        except subprocess.TimeoutExpired:
            return {"skipped": f"Ray Tune did not finish within {budget_s + 240:.0f} s"}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            done = result["completed"]
            # Wall time per trial only when every trial ran (never spread over fewer trials).
            result["per_trial_s"] = result["elapsed_s"] / n if done == n else None
            result["after_startup_per_trial_s"] = after_startup(result.pop("ends"))
            inside = result.pop("in_function_s")
            result["in_function_median_s"] = statistics.median(inside) if inside else None
            return result
    tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
    return {"skipped": "Ray Tune run failed: " + " | ".join(tail)}


def secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"


def run(n: int = 1000, ray: bool = True, docs: bool = True) -> bool:
    """Run the benchmark; True when detlab meets the target with every trial completed."""
    with cluster(NAME, slots=2) as cl:
        ours = detlab(cl, n, timeout_s=max(120.0, n * 2.0))
    completed = ours["trial_states"].get("COMPLETED", 0)
    want = {"training": n * REPORTS, "validation": n}
    print(
        f"  detlab: {n} trials in {ours['elapsed_s']:.1f} s = {ours['per_trial_s']:.3f} s/trial "
        f"({ours['state']}, {completed} COMPLETED)",
        flush=True,
    )
    budget = max(300.0, n * RAY_BUDGET_PER_TRIAL_S)
    theirs = ray_tune(n, budget) if ray else {"skipped": "--no-ray"}
    if "skipped" in theirs:
        print(f"  Ray Tune skipped: {theirs['skipped']}", flush=True)
    else:
        print(
            f"  Ray Tune {theirs['version']}: {theirs['completed']}/{n} trials in "
            f"{theirs['elapsed_s']:.1f} s",
            flush=True,
        )

    ok = (
        ours["state"] == "COMPLETED"
        and completed == n
        and all(ours["reports"].get(g, 0) == c for g, c in want.items())
        and ours["per_trial_s"] <= TARGET_S
    )
    rows: list[Row] = [
        ("detlab trials (random search, 2 slots)", f"{n:,}", ""),
        ("detlab trials COMPLETED", f"{completed:,}", f"{n:,}"),
        (
            "detlab reports persisted (training / validation)",
            f"{ours['reports'].get('training', 0):,} / {ours['reports'].get('validation', 0):,}",
            f"{want['training']:,} / {want['validation']:,}",
        ),
        ("detlab created -> COMPLETED", f"{ours['elapsed_s']:.1f} s", ""),
        (
            "detlab wall time / trials (throughput)",
            f"{ours['per_trial_s']:.3f} s",
            f"<= {TARGET_S} s",
        ),
        (
            "detlab per trial after start-up (throughput)",
            secs(ours["after_startup_per_trial_s"]),
            "",
        ),
        ("detlab trial latency, created -> ended, median", secs(ours["latency_median_s"]), ""),
        ("detlab trial latency, created -> ended, p95", secs(ours["latency_p95_s"]), ""),
    ]
    phases = [
        ("trial created -> process started", ours["median_created_to_started_s"]),
        ("process started -> ended", ours["median_started_to_ended_s"]),
        ("process ended -> trial ended", ours["median_allocation_end_to_trial_end_s"]),
    ]
    rows += [
        (f"detlab median {what}", f"{value:.3f} s", "")
        for what, value in phases
        if value is not None
    ]
    if "skipped" in theirs:
        rows.append(("Ray Tune", f"skipped: {theirs['skipped']}", ""))
    else:
        ver, per = theirs["version"], theirs["per_trial_s"]
        cut = theirs["completed"] < n
        rows += [
            (
                f"Ray Tune {ver} trials finished",
                f"{theirs['completed']:,} of {n:,} in {theirs['elapsed_s']:.1f} s",
                f"time budget {budget:.0f} s" + (": CUT SHORT" if cut else ""),
            ),
            (
                f"Ray Tune {ver} wall time / trials (throughput)",
                secs(per) if per else "- (not every trial ran)",
                "",
            ),
            (
                f"Ray Tune {ver} per trial after start-up (throughput)",
                secs(theirs["after_startup_per_trial_s"]),
                "",
            ),
            (
                f"Ray Tune {ver} trial latency, inside the function only, median",
                secs(theirs["in_function_median_s"]),
                "",
            ),
        ]
        ours_rate, their_rate = (
            ours["after_startup_per_trial_s"],
            theirs["after_startup_per_trial_s"],
        )
        if ours_rate and their_rate:
            rows.append(
                (
                    "Ray Tune / detlab per trial, after start-up",
                    f"{their_rate / ours_rate:.1f}x",
                    "(Ray cut short: over the trials it ran)" if cut else "",
                )
            )
        if per:
            rows.append(
                (
                    "Ray Tune / detlab per trial, wall time / N",
                    f"{per / ours['per_trial_s']:.1f}x",
                    "",
                )
            )
    summary = (
        f"A random search of {n:,} trivial trials (each reports {REPORTS} training metrics and "
        "one validation, then completes its operation) through the whole loop: searcher -> "
        "queue -> agent -> process -> metrics -> completion, one process-runtime agent with 2 "
        "slots, master on PostgreSQL. Throughput: wall time from the experiment's creation to "
        "COMPLETED over N (start-up included), and after start-up ((first trial end -> last "
        "trial end) / (N - 1)); latency: one trial's creation -> its end. Ray Tune side by side, "
        "the same N: a function trainable reporting 10 times, random samples, 2 concurrent "
        "trials on a 2-CPU local Ray (own venv); `Tuner.fit()` wall time over N, and the same "
        "after-start-up rate from the trials' end times. Every figure is measured in this run."
    )
    publish(NAME, summary, rows, {"detlab": ours, "ray_tune": theirs}, docs)
    return ok
