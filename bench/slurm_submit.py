"""slurm_submit: what the Slurm resource manager adds to Slurm's own submission and tracking.

Needs a Slurm answering for SLURM_CONF (`scripts/slurm/up /tmp/detlab-slurm`, which
scripts/test starts). In the same run, alternating round by round:

- Slurm alone: `sbatch --wrap 'echo bench-hello'` -> the line in its output file (polled 5 ms).
- detlab on that Slurm: submit the one-line trial -> its first line through the logs API; then
  the lag from Slurm's end of the job (squeue polled every 20 ms) to detlab's end of the
  allocation (the experiment COMPLETED).

Then state tracking at scale: 1,000 held detlab-looking jobs in the queue, one tick's `squeue`
and parse (wall and CPU time, the child's included), median of 10.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from bench._cluster import Cluster, cluster, tar_dir
from bench._report import RESULTS, Row, publish
from bench.submit_latency import HELLO, MARKER, first_line, first_trial
from master.rm import slurm_cli as cli

NAME = "slurm_submit"
QUEUED_JOBS = 1000


def master_yaml(jobs: Path) -> str:
    return yaml.safe_dump(
        {
            "resource_manager": {
                "type": "slurm",
                "job_storage_root": str(jobs),
                "default_compute_resource_pool": "low",
                "slot_type": "cpu",
            },
            "resource_pools": [{"pool_name": "low"}],
        }
    )


def config(storage: Path) -> str:
    return yaml.safe_dump(
        {
            "name": "bench-slurm-submit",
            "entrypoint": "python3 trial.py",
            "hyperparameters": {},
            "searcher": {
                "name": "single",
                "metric": "loss",
                "smaller_is_better": True,
                "max_length": {"batches": 1},
            },
            "resources": {"slots_per_trial": 1, "resource_pool": "low"},
            "max_restarts": 0,
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        }
    )


def slurm_alone(work: Path) -> float:
    out = work / f"plain-{uuid.uuid4().hex}.out"
    t0 = time.time()
    subprocess.run(
        ["sbatch", "--parsable", "--partition=low", f"--output={out}", "--wrap", f"echo {MARKER}"],
        check=True,
        capture_output=True,
    )
    while True:
        try:
            if MARKER in out.read_text():
                return time.time() - t0
        except OSError:
            pass
        if time.time() - t0 > 60:
            raise TimeoutError("sbatch --wrap printed nothing within 60 s")
        time.sleep(0.005)


def slurm_states() -> dict[str, str]:
    out = subprocess.run(list(cli.SQUEUE_ARGV), capture_output=True, text=True).stdout
    return {alloc: row.state for alloc, row in cli.parse_squeue(out).items()}


def detlab_round(cl: Cluster, text: str, model: bytes) -> dict[str, Any]:
    before = set(slurm_states())
    t0 = time.time()
    exp = cl.client.create_experiment(text, model)
    trial = first_trial(cl, exp["id"])
    first_line(cl, trial["id"])
    t_line = time.time() - t0
    slurm_end = detlab_end = None
    deadline = time.time() + 60
    while (slurm_end is None or detlab_end is None) and time.time() < deadline:
        now = time.time()
        if slurm_end is None:
            ours = {a: s for a, s in slurm_states().items() if a not in before}
            if ours and all(cli.phase_of(s) == cli.JobPhase.ENDED for s in ours.values()):
                slurm_end = now
        if detlab_end is None and cl.client.get_experiment(exp["id"])["state"] == "COMPLETED":
            detlab_end = now
        time.sleep(0.02)
    if slurm_end is None or detlab_end is None:
        raise TimeoutError(f"experiment {exp['id']} did not end in Slurm and detlab within 60 s")
    return {"experiment_id": exp["id"], "line_s": t_line, "lag_s": max(0.0, detlab_end - slurm_end)}


def tick_at_scale(work: Path) -> dict[str, float]:
    """One tick's squeue + parse with QUEUED_JOBS held detlab jobs in the queue."""
    ids = []
    for i in range(QUEUED_JOBS):
        out = subprocess.run(
            ["sbatch", "--parsable", "--hold", "--partition=low", f"--output={work}/held.out",
             f"--comment={cli.COMMENT_PREFIX}bench-{i}", "--wrap", "true"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        ids.append(out.stdout.strip().split(";")[0])
    walls, cpus = [], []
    try:
        for _ in range(10):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            s0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            out = subprocess.run(list(cli.SQUEUE_ARGV), capture_output=True, text=True)
            rows = cli.parse_squeue(out.stdout)
            walls.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            s1 = resource.getrusage(resource.RUSAGE_SELF)
            cpus.append(
                (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
                + (s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime)
            )
            assert len([a for a in rows if a.startswith("bench-")]) == QUEUED_JOBS
    finally:
        for start in range(0, len(ids), 200):
            subprocess.run(["scancel", *ids[start : start + 200]], check=False)
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}


def run(n: int = 10, docs: bool = True) -> bool:
    if not os.environ.get("SLURM_CONF"):
        raise RuntimeError(f"{NAME}: set SLURM_CONF (scripts/slurm/up /tmp/detlab-slurm)")
    load = os.getloadavg()[0]
    work = RESULTS / "work" / f"{NAME}-jobs-{time.strftime('%Y%m%d-%H%M%S')}"
    (work / "jobs").mkdir(parents=True)
    plain: list[float] = []
    rounds: list[dict[str, Any]] = []
    # its own database: another benchmark may hold detlab_bench's master lock
    yaml_text = master_yaml(work / "jobs")
    with cluster(NAME, slots=0, master_yaml=yaml_text, db_name="detlab_bench_slurm") as cl:
        text, model = config(work / "checkpoints"), tar_dir(HELLO)
        detlab_round(cl, text, model)  # warm-up: imports and caches on both sides
        slurm_alone(work)
        for i in range(n):
            plain.append(slurm_alone(work))
            rounds.append(detlab_round(cl, text, model))
            print(
                f"  #{i + 1}: sbatch {plain[-1]:.2f} s, detlab {rounds[-1]['line_s']:.2f} s, "
                f"state lag {rounds[-1]['lag_s']:.2f} s",
                flush=True,
            )
        scale = tick_at_scale(work)
    sb, dl = statistics.median(plain), statistics.median(r["line_s"] for r in rounds)
    lag = max(r["lag_s"] for r in rounds)
    limit = 1.5 * sb + 0.5
    ms = lambda v: f"{v * 1000:.0f} ms"  # noqa: E731
    at = f"at {QUEUED_JOBS} queued jobs"
    rows: list[Row] = [
        ("sbatch --wrap -> first output line, median", f"{sb:.2f} s", ""),
        (
            "detlab submit -> first trial line (Slurm RM), median",
            f"{dl:.2f} s",
            f"<= {limit:.2f} s",
        ),
        ("Slurm job end -> detlab's end, max", f"{lag:.2f} s", "<= 2 s"),
        (f"one tick's squeue + parse {at}, wall", ms(scale["wall_s"]), ""),
        (f"one tick's squeue + parse {at}, CPU", ms(scale["cpu_s"]), ""),
    ]
    summary = (
        f"{n} rounds, alternating, on the one-node test Slurm (scripts/slurm/up), master on "
        f"PostgreSQL, load average {load:.2f} at the start. detlab's line is read through the "
        "logs API; the lag is from squeue showing the job ended to the experiment COMPLETED."
    )
    publish(NAME, summary, rows, {"plain": plain, "detlab": rounds, "scale": scale}, docs)
    return dl <= limit and lag <= 2.0
