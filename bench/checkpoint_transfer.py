"""checkpoint_transfer: S3 checkpoint upload/download throughput and GC planning/deletion.

Against moto's S3 server on loopback (started here), in the same run and on the same files:
- one big file (default 1 GiB) and many small files (default 1,000 x 1 MiB), uploaded and
  downloaded by detlab's `S3StorageManager` (one transfer manager for the whole checkpoint,
  16 files/parts in flight, 16 MiB parts) and by boto3's own `upload_file`/`download_file` with
  default settings, one call per file;
- GC planning of an experiment with 10,000 checkpoints (the pure keep rule), and the deletion
  throughput of `delete_files` (list, delete, verify) on small checkpoints.

    .venv/bin/python bench/checkpoint_transfer.py --full      # the issue's sizes (the default)
    .venv/bin/python bench/run.py checkpoint_transfer --big-mb 128 --small-count 200  # reduced
    .venv/bin/python bench/checkpoint_transfer.py --gc-only   # GC planning only (10,000)

At full size the run needs about 3 GiB of free disk under the temp dir (the 1 GiB file and its
two downloads) and about 2.5 GiB of memory for moto's server (it keeps objects in memory).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import Row, publish  # noqa: E402

NAME = "checkpoint_transfer"
MiB = 1024 * 1024
KEY, SECRET = "bench-key", "bench-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto(log: Path) -> tuple[subprocess.Popen, str]:
    import requests

    port = _free_port()
    exe = Path(sys.executable).parent / "moto_server"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            requests.get(url, timeout=1)
            return proc, url
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto_server did not start")


def _write_files(root: Path, count: int, size: int) -> None:
    root.mkdir(parents=True)
    block = os.urandom(min(size, 4 * MiB))
    for i in range(count):
        with open(root / f"f{i:05d}.bin", "wb") as f:
            left = size
            while left > 0:
                n = min(left, len(block))
                f.write(block[:n])
                left -= n


def _baseline_client(endpoint: str):  # type: ignore[no-untyped-def]
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _transfer_case(
    endpoint: str, bucket: str, src: Path, tmp: Path, label: str, det_first: bool = False
) -> dict:
    from harness.storage.s3 import S3StorageManager

    files = sorted(p for p in src.iterdir())
    total = sum(p.stat().st_size for p in files)
    det = S3StorageManager(bucket, "det", endpoint_url=endpoint, access_key=KEY, secret_key=SECRET)
    uuid = str(uuidlib.uuid4())
    base = _baseline_client(endpoint)

    def det_up() -> None:
        det.upload(src, uuid)

    def det_down() -> None:
        det.download(uuid, tmp / f"det-{label}")

    def base_up() -> None:
        for p in files:
            base.upload_file(str(p), bucket, f"base/{uuid}/{p.name}")

    def base_down() -> None:
        out = tmp / f"base-{label}"
        out.mkdir()
        for p in files:
            base.download_file(bucket, f"base/{uuid}/{p.name}", str(out / p.name))

    # Alternate the two sides so neither always runs on a warmer server (and, across rounds,
    # neither always goes first).
    if det_first:
        t_det_up = _timed(det_up)
        t_base_up = _timed(base_up)
        t_base_down = _timed(base_down)
        t_det_down = _timed(det_down)
    else:
        t_base_up = _timed(base_up)
        t_det_up = _timed(det_up)
        t_det_down = _timed(det_down)
        t_base_down = _timed(base_down)
    got = sorted((tmp / f"det-{label}").iterdir())
    assert [p.name for p in got] == [p.name for p in files], "detlab download is incomplete"
    assert sum(p.stat().st_size for p in got) == total
    shutil.rmtree(tmp / f"det-{label}")
    shutil.rmtree(tmp / f"base-{label}")
    det.delete(uuid)
    keys = [{"Key": f"base/{uuid}/{p.name}"} for p in files]
    for i in range(0, len(keys), 1000):
        base.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True})
    mbs = total / MiB
    return {
        "bytes": total,
        "files": len(files),
        "det_up_mbs": mbs / t_det_up,
        "base_up_mbs": mbs / t_base_up,
        "det_down_mbs": mbs / t_det_down,
        "base_down_mbs": mbs / t_base_down,
    }


def _paired(cases: list[dict]) -> dict:
    """Medians of each side's throughput and, per direction, the mean of the rounds' ratios
    (detlab / boto3, each round's two sides measured back to back) with its standard error."""
    out: dict = {}
    for key in ("det_up_mbs", "base_up_mbs", "det_down_mbs", "base_down_mbs"):
        out[key] = statistics.median(c[key] for c in cases)
    for d in ("up", "down"):
        ratios = [c[f"det_{d}_mbs"] / c[f"base_{d}_mbs"] for c in cases]
        out[f"{d}_ratio"] = statistics.fmean(ratios)
        se = statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else float("nan")
        out[f"{d}_ratio_se"] = se
    return out


def _gc_planning(n: int = 10_000, trials: int = 100, repeats: int = 5) -> dict:
    from master.ckpt.policy import Candidate, Policy, plan

    rng = random.Random(3)
    cands = [
        Candidate(
            uuid=str(uuidlib.UUID(int=rng.getrandbits(128))),
            trial_id=i % trials,
            order=float(i),
            metric=rng.random() if rng.random() < 0.7 else None,
            protected=rng.random() < 0.01,
            size=rng.randint(1, 100) * MiB,
        )
        for i in range(n)
    ]
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        p = plan(cands, Policy(5, 1, 1), smaller_is_better=True)
        times.append(time.perf_counter() - t)
    return {
        "n": n,
        "max_s": max(times),
        "median_s": sorted(times)[len(times) // 2],
        "deleted": len(p.delete),
        "kept": len(p.keep),
    }


def _gc_planning_db(n: int = 10_000, trials: int = 100) -> dict:
    """`plan_experiment` on PostgreSQL: the query of 10,000 checkpoints, their validations and
    the protected ones, plus the keep rule (what the GC job and the dry run do)."""
    import tempfile as _tempfile

    from bench._cluster import database
    from master.app import create_app, prepare_database
    from master.ckpt.gc import plan_experiment
    from master.config import MasterConfig
    from master.db import db, utcnow
    from master.models import Checkpoint, Experiment, Metric, Trial

    os.environ.setdefault("DET_ADMIN_PASSWORD", "bench-admin")
    os.environ.setdefault("DET_AGENT_TOKEN", "bench-agent")
    rng = random.Random(5)
    with database("detlab_bench_gc") as url:
        data = Path(_tempfile.mkdtemp(prefix="det-bench-gc-"))
        app = create_app(MasterConfig(db=url, data_dir=data))
        prepare_database(app)  # the schema and the admin (owner 1)
        with app.app_context():
            exp = Experiment(
                name="gc-bench",
                state="ACTIVE",
                owner_id=1,
                config={"searcher": {"metric": "loss", "smaller_is_better": True}},
                original_config="",
                seed=1,
            )
            db.session.add(exp)
            db.session.flush()
            tids = []
            for i in range(trials):
                t = Trial(
                    experiment_id=exp.id, request_id=str(i), state="ACTIVE", hparams={}, seed=i
                )
                db.session.add(t)
                db.session.flush()
                tids.append(t.id)
            now = utcnow()
            ckpts, metrics = [], []
            for i in range(n):
                tid, steps = tids[i % trials], (i // trials + 1) * 100
                ckpts.append(
                    {
                        "uuid": str(uuidlib.UUID(int=rng.getrandbits(128))),
                        "trial_id": tid,
                        "experiment_id": exp.id,
                        "steps_completed": steps,
                        "metadata_": {},
                        "resources": {"state.pt": 1000},
                        "size": 1000,
                        "state": "ACTIVE",
                        "storage": {},
                        "reported_at": now,
                        "delete_attempts": 0,
                    }
                )
                if rng.random() < 0.7:
                    metrics.append(
                        {
                            "trial_id": tid,
                            "group": "validation",
                            "steps_completed": steps,
                            "metrics": {"loss": rng.random()},
                            "reported_at": now,
                        }
                    )
            db.session.execute(
                Checkpoint.__table__.insert(),
                [{("metadata" if k == "metadata_" else k): v for k, v in c.items()} for c in ckpts],
            )
            db.session.execute(Metric.__table__.insert(), metrics)
            db.session.commit()
            times = []
            for _ in range(3):
                e = db.session.get(Experiment, exp.id)
                t0 = time.perf_counter()
                p = plan_experiment(e)
                times.append(time.perf_counter() - t0)
                db.session.expire_all()
            db.session.remove()
            db.engine.dispose()
        shutil.rmtree(data, ignore_errors=True)
    return {"n": n, "max_s": max(times), "median_s": sorted(times)[1], "kept": len(p.keep)}


def _gc_deletion(endpoint: str, bucket: str, n: int) -> dict:
    from master.ckpt.gc import delete_files

    base = _baseline_client(endpoint)
    storage = {
        "type": "s3",
        "bucket": bucket,
        "prefix": "gc",
        "endpoint_url": endpoint,
        "access_key": KEY,
        "secret_key": SECRET,
    }
    uuids = [str(uuidlib.uuid4()) for _ in range(n)]
    for u in uuids:
        for name in ("state.pt", "metadata.json"):
            base.put_object(Bucket=bucket, Key=f"gc/{u}/{name}", Body=b"x" * 1024)
    from master.app import create_app
    from master.config import MasterConfig

    # delete_files keeps one backend per storage config in the master's state: an app context.
    data = Path(tempfile.mkdtemp(prefix="det-bench-gcdel-"))
    app = create_app(MasterConfig(data_dir=data))
    with app.app_context():
        t = time.perf_counter()
        for u in uuids:
            delete_files(storage, u)
        elapsed = time.perf_counter() - t
    shutil.rmtree(data, ignore_errors=True)
    left = base.list_objects_v2(Bucket=bucket, Prefix="gc/").get("KeyCount", 0)
    return {"n": n, "seconds": elapsed, "per_s": n / elapsed, "left": left}


def run(
    big_mb: int = 1024,
    small_count: int = 1000,
    small_kb: int = 1024,
    gc_deletes: int = 300,
    rounds: int = 3,
    docs: bool = True,
) -> bool:
    planning = _gc_planning()  # before the S3 server starts: nothing else runs
    planning_db = _gc_planning_db()
    tmp = Path(tempfile.mkdtemp(prefix="det-bench-ckpt-"))
    proc, endpoint = _start_moto(tmp / "moto.log")
    try:
        bucket = "bench"
        _baseline_client(endpoint).create_bucket(Bucket=bucket)
        _write_files(tmp / "big", 1, big_mb * MiB)
        bigs = [
            _transfer_case(endpoint, bucket, tmp / "big", tmp, "big", det_first=r % 2 == 1)
            for r in range(rounds)
        ]
        shutil.rmtree(tmp / "big")
        _write_files(tmp / "small", small_count, small_kb * 1024)
        smalls = [
            _transfer_case(endpoint, bucket, tmp / "small", tmp, "small", det_first=r % 2 == 1)
            for r in range(rounds)
        ]
        shutil.rmtree(tmp / "small")
        deletion = _gc_deletion(endpoint, bucket, gc_deletes)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)

    big, small = _paired(bigs), _paired(smalls)

    def ratio(c: dict, d: str) -> float:
        return float(c[f"{d}_ratio"])

    rows: list[Row] = []
    for label, c, target in (
        (f"1 x {big_mb} MiB", big, ">= 0.9x"),
        (f"{small_count} x {small_kb} KiB", small, "> 1x"),
    ):
        for d, word in (("up", "upload"), ("down", "download")):
            rows.append(
                (
                    f"{label} {word}: detlab / boto3 default (medians; paired ratio)",
                    f"{c[f'det_{d}_mbs']:.0f} / {c[f'base_{d}_mbs']:.0f} MiB/s, "
                    f"{ratio(c, d):.2f}x +- {c[f'{d}_ratio_se']:.2f}",
                    target,
                )
            )
    rows.append(
        (
            f"GC planning, {planning['n']:,} checkpoints (max of 5)",
            f"{planning['max_s'] * 1000:.0f} ms",
            "<= 1 s",
        )
    )
    rows.append(
        (
            f"GC planning from PostgreSQL, {planning_db['n']:,} checkpoints (max of 3)",
            f"{planning_db['max_s'] * 1000:.0f} ms",
            "<= 1 s",
        )
    )
    rows.append(
        (
            f"GC deletion, {deletion['n']} checkpoints of 2 files",
            f"{deletion['per_s']:.0f} checkpoints/s ({deletion['left']} objects left)",
            "reported",
        )
    )
    met = (
        ratio(big, "up") >= 0.9
        and ratio(big, "down") >= 0.9
        and ratio(small, "up") > 1
        and ratio(small, "down") > 1
        and planning["max_s"] <= 1.0
        and planning_db["max_s"] <= 1.0
        and deletion["left"] == 0
    )
    summary = (
        "S3 checkpoint transfers against moto's server on loopback, detlab's `S3StorageManager` "
        "(one transfer manager per checkpoint, 16 in flight, 16 MiB parts) vs boto3's "
        "`upload_file`/`download_file` with default settings, one call per file, same files, "
        f"same run, {rounds} rounds per size (the side that goes first alternates; the ratio "
        f"is the mean of the rounds' ratios +- its standard error); sizes: 1 x {big_mb} MiB "
        f"and {small_count} x {small_kb} KiB"
        + (" (reduced: the machine is shared)" if big_mb < 1024 or small_count < 1000 else "")
        + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end"
        + ". GC: the pure keep rule over 10,000 checkpoints of 100 trials (policy 5/1/1), and "
        "`plan_experiment` reading them (70% with a validation) from PostgreSQL (default "
        "policy); deletion = list, delete, verify per checkpoint on the S3 server."
    )
    publish(
        NAME,
        summary,
        rows,
        {
            "big": big,
            "small": small,
            "big_rounds": bigs,
            "small_rounds": smalls,
            "planning": planning,
            "planning_db": planning_db,
            "deletion": deletion,
        },
        docs=docs,
    )
    return met


FULL = {"big_mb": 1024, "small_count": 1000, "small_kb": 1024, "gc_deletes": 300}


def run_gc_only() -> bool:
    """GC planning at full size (10,000 checkpoints, pure and from PostgreSQL), printed with the
    load average around it; docs/benchmarks.md is not touched."""
    load_before = os.getloadavg()
    planning = _gc_planning()
    planning_db = _gc_planning_db()
    load_after = os.getloadavg()
    print(
        f"GC planning, {planning['n']:,} checkpoints: pure max {planning['max_s'] * 1000:.0f} ms"
        f" (median {planning['median_s'] * 1000:.0f}); from PostgreSQL max "
        f"{planning_db['max_s'] * 1000:.0f} ms (median {planning_db['median_s'] * 1000:.0f}); "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after, "
        f"{os.cpu_count()} cores"
    )
    return planning["max_s"] <= 1.0 and planning_db["max_s"] <= 1.0


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--big-mb", type=int, default=FULL["big_mb"])
    p.add_argument("--small-count", type=int, default=FULL["small_count"])
    p.add_argument("--small-kb", type=int, default=FULL["small_kb"])
    p.add_argument("--gc-deletes", type=int, default=FULL["gc_deletes"])
    p.add_argument("--rounds", type=int, default=3, help="transfer rounds per size (paired)")
    p.add_argument(
        "--full",
        action="store_true",
        help="the issue's sizes whatever the other flags say: 1 x 1 GiB, 1,000 x 1 MiB",
    )
    p.add_argument("--gc-only", action="store_true", help="only GC planning (10,000 checkpoints)")
    p.add_argument("--no-docs", dest="docs", action="store_false")
    a = p.parse_args()
    if a.gc_only:
        sys.exit(0 if run_gc_only() else 1)
    sizes = (
        dict(FULL)
        if a.full
        else {
            "big_mb": a.big_mb,
            "small_count": a.small_count,
            "small_kb": a.small_kb,
            "gc_deletes": a.gc_deletes,
        }
    )
    sys.exit(0 if run(**sizes, rounds=a.rounds, docs=a.docs) else 1)
