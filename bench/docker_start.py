"""docker_start: submit -> first line of trial output with the Docker runtime, next to the
engine's own `docker run` start time measured in the same run.

N submissions, one after another, of a trivial experiment whose trial prints one line first thing
(bench/trials/hello), to an idle `--runtime docker` agent; the image is the docker tests' bare
Debian + python3 image (the agent injects the harness). Both sides are timed from the user's side,
on the same clock: detlab from starting the submit request to the trial's first line read through
the logs API; the baseline, interleaved in the same run, `docker run --rm IMAGE python3 -c
'print(...)'` from starting the command to reading its line. Target: detlab's median within 1.5x
of docker run's. Detail only: the server-side span (experiment `created_at` -> the engine's
timestamp of the line), which leaves out the submit request and log delivery.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._cluster import (
    RESULTS,
    Cluster,
    bin_path,
    database,
    free_port,
    spawn,
    stop,
    tar_dir,
    wait_for,
)
from bench._report import Row, percentile, publish
from bench.submit_latency import HELLO, MARKER, first_line, first_trial, ts
from harness.api import Session
from harness.api.client import Client

NAME = "docker_start"
TARGET_RATIO = 1.5


def config(storage: Path, image: str) -> str:
    import yaml

    return yaml.safe_dump(
        {
            "name": "bench-docker-start",
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
            "environment": {"image": image},
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        }
    )


@contextlib.contextmanager
def docker_cluster(agent_id: str) -> Iterator[Cluster]:
    """Master (PostgreSQL `detlab_bench`) + one `--runtime docker` agent with one CPU slot."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / "work" / f"{NAME}-{stamp}"
    logs = RESULTS / "logs" / f"{NAME}-{stamp}"
    work.mkdir(parents=True)
    password = secrets.token_urlsafe(12)
    env = {
        **os.environ,
        "DET_ADMIN_PASSWORD": password,
        "DET_AGENT_TOKEN": secrets.token_urlsafe(24),
    }
    env.pop("DET_MASTER", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with database("detlab_bench") as db_url:
        procs: list[subprocess.Popen] = []
        try:
            master_cmd = [bin_path("det-master"), "--db", db_url, "--host", "127.0.0.1"]
            master_cmd += ["--port", str(port), "--data-dir", str(work / "master")]
            procs.append(spawn(master_cmd, logs / "master.log", env))
            client = Client(Session(url))
            wait_for("master health", lambda: client.health(), 60, procs)
            client.login("admin", password)
            agent_cmd = [bin_path("det-agent"), "--master", url, "--slots", "1"]
            agent_cmd += ["--runtime", "docker", "--agent-id", agent_id]
            agent_cmd += ["--data-dir", str(work / "master")]
            procs.append(spawn(agent_cmd, logs / "agent.log", env))
            wait_for(
                "docker agent",
                lambda: any(
                    a["state"] == "ACTIVE" and a.get("runtime") == "docker"
                    for a in client.list_agents()
                ),
                60,
                procs,
            )
            yield Cluster(url, db_url, client, work, logs, procs)
        finally:
            for p in reversed(procs):
                stop(p)
            shutil.rmtree(work, ignore_errors=True)


def docker_run_once(image: str) -> float:
    """Seconds from starting `docker run --rm` to reading the container's first line."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["docker", "run", "--rm", image, "python3", "-c", f"print({MARKER!r}, flush=True)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    elapsed = time.monotonic() - t0
    _, err = proc.communicate(timeout=60)
    if MARKER not in line:
        raise RuntimeError(f"docker run printed {line!r} (exit {proc.returncode}): {err[-500:]}")
    return elapsed


def one(cl: Cluster, text: str, model: bytes) -> dict[str, Any]:
    t0 = time.time()
    exp = cl.client.create_experiment(text, model)
    trial = first_trial(cl, exp["id"])
    line = first_line(cl, trial["id"])
    t_seen = time.time()
    state = cl.wait_experiments([exp["id"]], timeout=60)[exp["id"]]
    return {
        "experiment_id": exp["id"],
        "state": state,
        "server_s": ts(line["timestamp"]) - ts(exp["created_at"]),
        "client_s": t_seen - t0,
    }


def run(n: int = 20, warmup: int = 2, budget_s: float = 240.0, docs: bool = True) -> bool:
    """Run the benchmark; True when the target is met."""
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from tests.docker.image import engine_error, ensure_image

    why = engine_error()
    if why:
        raise RuntimeError(f"{NAME} needs a Docker engine: {why} (run scripts/docker-setup)")
    image = ensure_image()
    baseline: list[float] = []
    for i in range(warmup + n):
        t = docker_run_once(image)
        if i >= warmup:
            baseline.append(t)
    print(f"  docker run -> first line: median {statistics.median(baseline) * 1000:.0f} ms")
    samples: list[dict[str, Any]] = []
    agent_id = f"bench-docker-{secrets.token_hex(3)}"
    with docker_cluster(agent_id) as cl:
        text, model = config(cl.work / "checkpoints", image), tar_dir(HELLO)
        start = time.monotonic()
        for i in range(warmup + n):
            if time.monotonic() - start > budget_s:
                print(f"{NAME}: time budget of {budget_s:.0f} s spent after {i} submissions")
                break
            sample = one(cl, text, model)
            if i >= warmup:
                samples.append(sample)
                # Interleave the baseline too, so both see the same machine load.
                baseline.append(docker_run_once(image))
            label = f"warm-up {i + 1}" if i < warmup else f"#{i + 1 - warmup}"
            print(
                f"  {label:>10}: server {sample['server_s'] * 1000:7.1f} ms, "
                f"client {sample['client_s'] * 1000:7.1f} ms, {sample['state']}",
                flush=True,
            )
    if not samples:
        raise RuntimeError(f"{NAME}: no submission completed")
    server = [s["server_s"] for s in samples]
    client = [s["client_s"] for s in samples]
    failed = sum(s["state"] != "COMPLETED" for s in samples)
    # Like with like: both from the user's side (request/command start -> line read).
    median, base = statistics.median(client), statistics.median(baseline)
    ratio = median / base
    ms = lambda v: f"{v * 1000:.0f} ms"  # noqa: E731
    rows: list[Row] = [
        ("submissions (after warm-up)", str(len(samples)), str(n)),
        ("docker run -> first line read, median", ms(base), f"({len(baseline)} runs)"),
        ("detlab submit -> first line read, median", ms(median), f"< {ms(base * TARGET_RATIO)}"),
        ("ratio to docker run (medians, both client-side)", f"{ratio:.2f}x", f"<= {TARGET_RATIO}x"),
        ("detlab submit -> first line read, p95", ms(percentile(client, 95)), ""),
        ("docker run -> first line read, p95", ms(percentile(baseline, 95)), ""),
        ("detail: created_at -> first line (server), median", ms(statistics.median(server)), ""),
        ("experiments not COMPLETED", str(failed), "0"),
    ]
    summary = (
        f"{len(samples)} sequential submissions of a one-line trial to an idle agent with the "
        f"Docker runtime (image `{image}`: Debian bookworm minbase + python3, harness injected), "
        "next to `docker run --rm IMAGE python3 -c print(...)`, interleaved in the same run. Both "
        "are timed from the user's side: detlab from starting the submit request to the line read "
        "through the logs API, docker run from starting the command to reading its line. Detail: "
        "the server-side span from the experiment's `created_at` to the engine's timestamp of "
        "the line (without the submit request and log delivery)."
    )
    publish(NAME, summary, rows, {"samples": samples, "docker_run_s": baseline}, docs)
    return ratio <= TARGET_RATIO and failed == 0
