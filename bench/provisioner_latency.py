"""provisioner_latency: pending trial -> launch request, through a real master and boto3
against moto's EC2 server on a loopback port.

N experiments (after one not counted), one after another, each one 1-slot trial in an aws
pool of 1-slot instances (none of them ever boots, so every trial needs an instance of its
own). For each: the experiment's `created_at` -> the instance row's `launched_at` (written
just before the RunInstances call) and -> the instance seen in EC2 (DescribeInstances from
the benchmark).
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import (  # noqa: E402
    RESULTS,
    bin_path,
    database,
    free_port,
    spawn,
    stop,
    tar_dir,
    wait_for,
)
from bench._report import Row, percentile, publish  # noqa: E402
from harness.api import Session  # noqa: E402
from harness.api.client import Client  # noqa: E402

NAME = "provisioner_latency"
TARGET_S = 5.0
HELLO = Path(__file__).resolve().parent / "trials" / "hello"


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def master_yaml(moto: str, n: int) -> str:
    return yaml.safe_dump(
        {
            "resource_pools": [
                {"pool_name": "default"},
                {
                    "pool_name": "cloud",
                    "provider": {
                        "type": "aws",
                        "region": "us-west-2",
                        "endpoint_url": moto,
                        "image_id": "ami-0abcdef1234567890",
                        "instance_type": "g4dn.xlarge",
                        "instance_slots": 1,
                        "max_instances": n + 5,
                        "max_agent_starting_period": "1h",
                    },
                },
            ]
        }
    )


def experiment(storage: Path) -> str:
    return yaml.safe_dump(
        {
            "name": "bench-provisioner-latency",
            "entrypoint": "python3 trial.py",
            "searcher": {
                "name": "single",
                "metric": "loss",
                "max_length": {"batches": 1},
            },
            "resources": {"slots_per_trial": 1, "resource_pool": "cloud"},
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        }
    )


def run(n: int = 20, docs: bool = True) -> bool:
    import boto3

    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / "work" / f"{NAME}-{stamp}"
    logs = RESULTS / "logs" / f"{NAME}-{stamp}"
    work.mkdir(parents=True)
    env = {
        **os.environ,
        "DET_ADMIN_PASSWORD": secrets.token_urlsafe(12),
        "DET_AGENT_TOKEN": secrets.token_urlsafe(24),
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
    }
    procs = []
    moto_port, port = free_port(), free_port()
    moto = f"http://127.0.0.1:{moto_port}"
    url = f"http://127.0.0.1:{port}"
    request, seen = [], []
    with database(f"detlab_bench_{secrets.token_hex(4)}") as db_url:  # other runs use theirs
        try:
            procs.append(
                spawn(
                    [bin_path("moto_server"), "-H", "127.0.0.1", "-p", str(moto_port)],
                    logs / "moto.log",
                    env,
                )
            )
            cfg = work / "master.yaml"
            cfg.write_text(master_yaml(moto, n))
            cmd = [bin_path("det-master"), "--db", db_url, "--port", str(port)]
            cmd += ["--data-dir", str(work / "master"), "--config", str(cfg)]
            procs.append(spawn(cmd, logs / "master.log", env))
            client = Client(Session(url))
            wait_for("master health", lambda: client.health(), 60, procs)
            client.login("admin", env["DET_ADMIN_PASSWORD"])
            ec2 = boto3.client(
                "ec2",
                region_name="us-west-2",
                endpoint_url=moto,
                aws_access_key_id="bench",
                aws_secret_access_key="bench",
            )

            def count() -> int:
                r = ec2.describe_instances(
                    Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
                )
                return sum(len(x["Instances"]) for x in r["Reservations"])

            model = tar_dir(HELLO)
            text = experiment(work / "ckpt")
            for i in range(n + 1):  # the first one warms up (boto3's import, the first listing)
                exp = client.create_experiment(text, model)
                created = ts(exp["created_at"])
                wait_for("instance in EC2", lambda i=i: count() > i, 60, procs)
                if i == 0:
                    continue
                seen.append(time.time() - created)
                pool = client.session.get("/provisioner/pools")["pools"][0]
                newest = max(ts(x["launched_at"]) for x in pool["instances"])
                request.append(newest - created)
        finally:
            for p in reversed(procs):
                stop(p)
    rows: list[Row] = [
        (
            "pending trial -> launch request: median, p95",
            f"{statistics.median(request):.2f} s, {percentile(request, 95):.2f} s",
            f"<= {TARGET_S:g} s",
        ),
        (
            "pending trial -> instance in EC2 (moto): median, p95",
            f"{statistics.median(seen):.2f} s, {percentile(seen, 95):.2f} s",
            "",
        ),
    ]
    summary = (
        f"{n} experiments one after another, each one 1-slot trial in an aws pool (boto3 "
        "against moto's server on loopback; the provisioning pass runs every second)."
    )
    publish(NAME, summary, rows, {"request_s": request, "seen_s": seen}, docs=docs)
    return percentile(request, 95) <= TARGET_S


if __name__ == "__main__":
    sys.exit(0 if run(docs="--no-docs" not in sys.argv) else 1)
