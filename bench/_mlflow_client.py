"""One MLflow load process (runs in bench/.venv-mlflow, not in detlab's venv).

python _mlflow_client.py setup URI                      -> prints the experiment id
python _mlflow_client.py report URI EXP REPORTS BARRIER DEADLINE INDEX MODE

MODE: `sync` (each `log_batch` waits for the server) or `async` (`log_batch(synchronous=False)`,
MLflow's own background logging, like detlab's shipper; the end is taken after every queued
batch has been acknowledged). The deadline stops queueing new batches in both modes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

KEYS = ("loss", "accuracy", "lr", "batch_time")
PER_CALL = 1000  # MLflow's limit of metric values per log_batch


def report(
    uri: str, exp_id: str, n: int, barrier: Path, deadline: float, index: int, mode: str
) -> None:
    if mode not in ("sync", "async"):
        raise SystemExit(f"unknown mode {mode!r} (sync or async)")
    synchronous = mode == "sync"
    pending = []
    client = MlflowClient(uri)
    run_id = client.create_run(exp_id).info.run_id
    (barrier / f"ready-{index}").touch()
    while not (barrier / "go").exists():
        time.sleep(0.005)
    start = time.time()
    sent, batch = 0, []
    for i in range(n):
        now = int(time.time() * 1000)
        values = (1.0 / (i + 1), i / n, 0.01, 0.001)
        batch += [Metric(k, v, now, i + 1) for k, v in zip(KEYS, values, strict=True)]
        if len(batch) >= PER_CALL or i == n - 1:
            op = client.log_batch(run_id, metrics=batch, synchronous=synchronous)
            if not synchronous:
                pending.append(op)
            sent += len(batch) // len(KEYS)
            batch = []
            if time.time() - start > deadline:
                break
    queued = time.time()
    for op in pending:  # async: the reports count once the server has them
        op.wait()
    end = time.time()
    result = {"run_id": run_id, "reports": sent, "start": start, "end": end, "queued": queued}
    tmp = barrier / f".result-{index}.tmp"
    tmp.write_text(json.dumps(result))
    os.replace(tmp, barrier / f"result-{index}.json")


def main() -> None:
    cmd, uri = sys.argv[1], sys.argv[2]
    if cmd == "setup":
        print(MlflowClient(uri).create_experiment(f"bench-{int(time.time())}"))
    else:
        exp_id, n, barrier, deadline, index, mode = sys.argv[3:9]
        report(uri, exp_id, int(n), Path(barrier), float(deadline), int(index), mode)


if __name__ == "__main__":
    main()
