"""Benchmark trial: waits at a file barrier, then reports training metrics as fast as it can.

hparams: `reports` (how many), `barrier_dir` (shared with the benchmark), `deadline_s` (stop early).
Writes `result-<trial_id>.json` into the barrier dir: reports sent, start and end (wall clock,
the end taken after the Core API context closed, i.e. after every report was flushed).
"""

import json
import os
import pathlib
import time
from typing import Any

import harness as det


def race(
    core: Any, barrier: pathlib.Path, trial_id: int, n: int, deadline: float
) -> tuple[float, int]:
    """Wait for the benchmark's go, then report `n` times; returns (start time, reports sent)."""
    (barrier / f"ready-{trial_id}").touch()
    while not (barrier / "go").exists():
        time.sleep(0.005)
    start = time.time()
    sent = 0
    for i in range(n):
        core.train.report_training_metrics(
            i + 1, {"loss": 1.0 / (i + 1), "accuracy": i / n, "lr": 0.01, "batch_time": 0.001}
        )
        sent += 1
        if i % 1000 == 999 and time.time() - start > deadline:
            break
    return start, sent


def main() -> None:
    info = det.get_cluster_info()
    assert info is not None, "runs on the cluster only"
    hp = info.trial.hparams
    barrier = pathlib.Path(hp["barrier_dir"])
    n, deadline = int(hp["reports"]), float(hp["deadline_s"])
    trial_id = info.trial.trial_id

    start, sent = 0.0, 0
    with det.core.init() as core:
        for op in core.searcher.operations():  # one operation: max_length is 1 batch
            if not start:
                start, sent = race(core, barrier, trial_id, n, deadline)
            op.report_completed(0.0)
    end = time.time()

    result = {"trial_id": trial_id, "reports": sent, "start": start, "end": end}
    tmp = barrier / f".result-{trial_id}.tmp"
    tmp.write_text(json.dumps(result))
    os.replace(tmp, barrier / f"result-{trial_id}.json")
    print(f"sent {sent} reports in {end - start:.3f} s", flush=True)


if __name__ == "__main__":
    main()
