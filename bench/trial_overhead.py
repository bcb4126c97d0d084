"""trial_overhead: wall time per trivial trial through the whole loop, detlab vs Ray Tune.

One experiment, `searcher: {name: random, max_trials: N, max_concurrent_trials: 2,
max_length: {batches: 10}}`, on one process-runtime agent with 2 slots (master on PostgreSQL):
searcher -> queue -> agent -> process -> 10 training reports + 1 validation -> completion, N
times. Figure: (experiment created -> COMPLETED) / N. Afterwards the database is checked: N
trials COMPLETED, 10 training and 1 validation report each.

Ray Tune (installed into `bench/.venv-ray`, kept apart from detlab's dependencies; skipped with
the reason when it cannot be installed): a function trainable reporting 10 times, N samples of
the same random search, 2 concurrent trials on a 2-CPU local Ray; `Tuner.fit()` wall time / trials
that finished (bounded by `time_budget_s`, so a slow run reports the rate of the trials it ran).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench._cluster import Cluster, cluster, tar_dir
from bench._report import Row, publish

NAME = "trial_overhead"
TARGET_S = 0.2
REPORTS = 10
TRIVIAL = Path(__file__).resolve().parent / "trials" / "trivial"
BENCH = Path(__file__).resolve().parent
RAY_VENV = BENCH / ".venv-ray"
RAY_PACKAGES = ["ray[tune]"]
RAY_BUDGET_S = 300

RAY_SCRIPT = r"""
import json, os, sys, tempfile, time
n, budget = int(sys.argv[1]), float(sys.argv[2])
import ray
from ray import tune
report = getattr(tune, "report", None)
if report is None:
    from ray.train import report

def trivial(config):
    for step in range(1, 11):
        report({"loss": config["x"] + 1.0 / step})

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
done = sum(1 for r in results if r.metrics and r.metrics.get("training_iteration") == 10)
print("RESULT " + json.dumps({
    "version": ray.__version__, "trials": n, "completed": done, "elapsed_s": elapsed,
    "errors": len(results.errors),
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
    }


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
            result["per_trial_s"] = result["elapsed_s"] / done if done else None
            return result
    tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
    return {"skipped": "Ray Tune run failed: " + " | ".join(tail)}


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
    theirs = ray_tune(n, RAY_BUDGET_S) if ray else {"skipped": "--no-ray"}
    if "skipped" in theirs:
        print(f"  Ray Tune skipped: {theirs['skipped']}", flush=True)
    else:
        print(
            f"  Ray Tune {theirs['version']}: {theirs['completed']}/{n} trials in "
            f"{theirs['elapsed_s']:.1f} s = {theirs['per_trial_s']:.3f} s/trial",
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
        ("detlab wall time per trial", f"{ours['per_trial_s']:.3f} s", f"<= {TARGET_S} s"),
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
        per = theirs["per_trial_s"]
        rows += [
            (
                f"Ray Tune {theirs['version']} trials finished",
                f"{theirs['completed']:,} of {n:,} in {theirs['elapsed_s']:.1f} s",
                f"time budget {RAY_BUDGET_S} s",
            ),
            (
                f"Ray Tune {theirs['version']} wall time per trial",
                f"{per:.3f} s" if per else "-",
                "about 1.1 s (issue)",
            ),
        ]
        if per:
            rows.append(("Ray Tune / detlab per trial", f"{per / ours['per_trial_s']:.1f}x", ""))
    summary = (
        f"A random search of {n:,} trivial trials (each reports {REPORTS} training metrics and "
        "one validation, then completes its operation) through the whole loop: searcher -> "
        "queue -> agent -> process -> metrics -> completion, one process-runtime agent with 2 "
        "slots, master on PostgreSQL; wall time from the experiment's creation to COMPLETED, per "
        "trial. Ray Tune side by side: a function trainable reporting 10 times, the same number "
        "of random samples, 2 concurrent trials on a 2-CPU local Ray (own venv), "
        "`Tuner.fit()` wall time per finished trial."
    )
    publish(NAME, summary, rows, {"detlab": ours, "ray_tune": theirs}, docs)
    return ok
