"""PyTorchTrial end to end: `entrypoint: model_def:DigitsTrial` on a real master and agents."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import ROOT, Cluster
from tests.integration.test_foundation import only_trial, submit

pytestmark = pytest.mark.integration

DIGITS = ROOT / "examples" / "digits"

# A slower DigitsTrial (so a pause lands mid-training) that can fail once on purpose.
SLOW_DEF = """
import os, time
from model_def import DigitsTrial


class SlowDigits(DigitsTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        hp = self.context.get_hparams()
        time.sleep(hp.get("sleep", 0))
        if (
            batch_idx == hp.get("fail_at")
            and self.context.distributed.rank == hp.get("fail_rank", 0)
            and os.environ.get("DET_TRIAL_RESTARTS", "0") == "0"
        ):
            raise RuntimeError(f"injected failure at batch {batch_idx}")
        return super().train_batch(batch, epoch_idx, batch_idx)
"""


def model_dir(tmp: Path) -> Path:
    d = tmp / "digits-model"
    if not d.exists():
        d.mkdir()
        shutil.copy(DIGITS / "model_def.py", d / "model_def.py")
        (d / "slow_def.py").write_text(SLOW_DEF)
    return d


def digits_config(cluster: Cluster, base: str = "const.yaml", **over: Any) -> str:
    cfg = yaml.safe_load((DIGITS / base).read_text())
    cfg["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(cluster.ckpt_dir)}
    cfg["reproducibility"] = {"experiment_seed": 1234}
    hp = over.pop("hparams", {})
    cfg["hyperparameters"].update(hp)
    cfg.update(over)
    return yaml.safe_dump(cfg, sort_keys=False)


def metrics(cluster: Cluster, trial_id: int) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    return {
        group: [
            (m["steps_completed"], m["metrics"])
            for m in cluster.get(f"/trials/{trial_id}/metrics", group=group)["metrics"]
        ]
        for group in ("training", "validation")
    }


def run_to_end(cluster: Cluster, config: str, model: Path) -> tuple[dict, int]:
    exp_id = submit(cluster, config, model)
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    return d, exp_id


def test_digits_trial_class_trains_validates_and_checkpoints(cluster: Cluster) -> None:
    config = digits_config(
        cluster,
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 300},
        },
        min_validation_period={"batches": 100},
        scheduling_unit=50,
    )
    d, _ = run_to_end(cluster, config, DIGITS)
    trial = d["trials"][0]
    assert trial["steps_completed"] == 300
    got = metrics(cluster, trial["id"])
    assert [s for s, _ in got["training"]] == [50, 100, 150, 200, 250, 300]
    assert [s for s, _ in got["validation"]] == [100, 200, 300]
    assert got["validation"][-1][1]["validation_accuracy"] > 0.85
    assert trial["best_validation"] is not None
    ckpts = cluster.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert [c["steps_completed"] for c in ckpts] == [300]
    assert (cluster.ckpt_dir / ckpts[0]["uuid"] / "state.pt").exists()
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "validation at batch 300" in logs


def test_pause_and_activate_gives_the_metrics_of_an_uninterrupted_run(cluster: Cluster) -> None:
    model = model_dir(cluster.tmp)
    config = digits_config(
        cluster,
        entrypoint="slow_def:SlowDigits",
        # 200 batches x 40 ms after batch 40: room for the `det experiment pause` process to
        # start and land on a loaded machine before training ends
        hparams={"sleep": 0.04, "dropout": 0.3},
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 240},
        },
        min_validation_period={"batches": 40},
        scheduling_unit=20,
    )
    d, _ = run_to_end(cluster, config, model)
    straight = d["trials"][0]

    exp_id = submit(cluster, config, model)
    tid = only_trial(cluster, exp_id)["id"]
    cluster.wait_trial(tid, lambda t: t["steps_completed"] >= 40, timeout=120, what="40 steps")
    cluster.det("experiment", "pause", str(exp_id))
    paused = cluster.wait_trial(
        tid, lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None, timeout=60
    )
    assert paused["latest_checkpoint"] and 40 <= paused["steps_completed"] < 240, paused
    cluster.det("experiment", "activate", str(exp_id))
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    resumed = d["trials"][0]
    assert resumed["seed"] == straight["seed"]
    assert re.search(r"resumed from checkpoint \S+ at batch \d+", "\n".join(cluster.logs(tid)))
    assert metrics(cluster, tid) == metrics(cluster, straight["id"])  # identical, not close


def test_two_workers_on_one_agent(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-2", slots=2)
    config = digits_config(
        cluster,
        "distributed.yaml",
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 200},
        },
        min_validation_period={"batches": 100},
    )
    d, _ = run_to_end(cluster, config, DIGITS)
    trial = d["trials"][0]
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "launching 2 worker(s)" in logs and "(ranks 0..1 of 2)" in logs
    got = metrics(cluster, trial["id"])
    assert [s for s, _ in got["validation"]] == [100, 200]
    assert got["validation"][-1][1]["validation_accuracy"] > 0.85


def test_two_workers_across_two_agents(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-a", slots=1)
    cluster.start_agent("agent-b", slots=1)
    config = digits_config(
        cluster,
        "distributed.yaml",
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 200},
        },
        min_validation_period={"batches": 100},
    )
    d, _ = run_to_end(cluster, config, DIGITS)
    trial = d["trials"][0]
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "container 0 of 2: ranks 0..0 of 2" in logs
    assert "container 1 of 2: ranks 1..1 of 2" in logs
    got = metrics(cluster, trial["id"])
    assert got["validation"][-1][1]["validation_accuracy"] > 0.85


def test_a_dead_worker_ends_the_trial_which_restarts_from_its_checkpoint(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-2", slots=2)
    model = model_dir(cluster.tmp)
    config = digits_config(
        cluster,
        "distributed.yaml",
        entrypoint="slow_def:SlowDigits",
        hparams={"fail_at": 70, "fail_rank": 1},
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 100},
        },
        min_checkpoint_period={"batches": 50},
        max_restarts=2,
    )
    d, _ = run_to_end(cluster, config, model)
    trial = d["trials"][0]
    assert trial["restarts"] == 1 and trial["steps_completed"] == 100
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "[rank=1] RuntimeError: injected failure at batch 70" in logs
    assert "worker rank 1 exited with code 1" in logs
    assert "resumed from checkpoint" in logs and "at batch 50" in logs
