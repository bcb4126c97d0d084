"""The TensorBoard task's process on its own (real TensorBoard, real files in shared_fs): it
serves the chosen trials' scalars under the proxy's path, only to requests with its token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import requests

from harness.core._distributed import DistributedContext
from harness.core._tensorboard import TensorboardManager
from harness.core._train import TrainContext
from harness.storage import build
from harness.tb_serve import parse_sources, trial_selector
from tests.cluster import free_port, wait_for


def test_selector_and_sources_are_checked() -> None:
    pick = trial_selector(5, [1, 12])
    assert pick("experiment/5/trial/1/events.x") and pick("experiment/5/trial/12/a/b")
    assert not pick("experiment/5/trial/123/events.x") and not pick("experiment/50/trial/1/x")
    for bad in (
        "",
        "[]",
        '[{"experiment_id": 1}]',
        '[{"experiment_id": 1, "storage": {}, "trial_ids": ["x"]}]',
    ):
        try:
            parse_sources(bad)
        except (ValueError, KeyError):
            continue
        raise AssertionError(f"{bad!r} was accepted")


def _write(storage: dict, exp_id: int, trial_id: int, losses: list[float], tmp: Path) -> None:
    tb = TensorboardManager(tmp / f"w{trial_id}", lambda: build(storage), exp_id, trial_id)
    train = TrainContext(None, DistributedContext(), tensorboard=tb)
    for i, loss in enumerate(losses):
        train.report_training_metrics((i + 1) * 10, {"loss": loss})
    train.close_tensorboard()


def test_serves_the_chosen_trials_with_its_token_only(tmp_path: Path) -> None:
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "shared")}
    _write(storage, 2, 5, [0.5, 0.25], tmp_path)
    _write(storage, 2, 6, [9.0], tmp_path)  # not chosen
    task_id, token, port = str(uuid.uuid4()), "s3cret-token", free_port()
    sources = [{"experiment_id": 2, "trial_ids": [5], "storage": storage}]
    env = {
        **os.environ,
        "DET_TASK_ID": task_id,
        "DET_TASK_PORT": str(port),
        "DET_TENSORBOARD_TOKEN": token,
        "DET_TENSORBOARD_SOURCES": json.dumps(sources),
        "TMPDIR": str(tmp_path),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.tb_serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}/proxy/{task_id}"
        auth = {"Authorization": f"token {token}"}

        def runs() -> dict | None:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                r = requests.get(f"{base}/data/runs", headers=auth, timeout=5)
            except requests.ConnectionError:
                return None
            return r.json() if r.status_code == 200 and r.json() else None

        assert wait_for(runs, 120, 0.5, what="TensorBoard's runs") == ["experiment/2/trial/5"]
        r = requests.get(
            f"{base}/data/plugin/scalars/scalars",
            params={"run": "experiment/2/trial/5", "tag": "Determined/loss"},
            headers=auth,
            timeout=10,
        )
        assert r.status_code == 200, r.text
        assert [(step, value) for _t, step, value in r.json()] == [(10, 0.5), (20, 0.25)]
        assert requests.get(f"{base}/data/runs", timeout=5).status_code == 403
        wrong = {"Authorization": "token nope"}
        assert requests.get(f"{base}/data/runs", headers=wrong, timeout=5).status_code == 403
    finally:
        proc.terminate()
        proc.wait(30)
