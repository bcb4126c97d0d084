"""Determined 0.38's DeepSpeed APIs on a real cluster, two CPU workers over gloo: a DeepSpeedTrial
(ZeRO stage 1, so each rank writes its own optimizer shard through engine.save_checkpoint)
reports metrics and checkpoints, and one paused and resumed from its checkpoint reports exactly
the numbers of one that never stopped; `determined.launch.deepspeed` runs a Core API script.

DeepSpeed's CPU path needs its `deepspeed_shm_comm_op`: the `deepspeed` extra is installed with
`DS_BUILD_SHM_COMM=1` (docs/determined-compat.md), so no test JIT-compiles it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster import Cluster
from tests.compat._util import SCRIPTS, TERMINAL, config
from tests.integration.test_foundation import submit

pytestmark = pytest.mark.integration

LAUNCH_TRIAL = "python3 -m determined.launch.deepspeed --trial ds_trial:RegressionTrial"


def _trial_config(cluster: Cluster, sleep: float) -> str:
    return config(
        cluster,
        {"name": "single", "metric": "val_loss", "max_length": {"batches": 40}},
        {
            "lr": 0.05,
            "sleep": sleep,
            "overwrite_deepspeed_args": {"zero_optimization": {"stage": 1}},
        },
        entrypoint=LAUNCH_TRIAL,
        resources={"slots_per_trial": 2},
        scheduling_unit=4,
        min_validation_period={"batches": 8},
        min_checkpoint_period={"batches": 8},
        max_restarts=0,
        reproducibility={"experiment_seed": 7},  # both experiments' trials get the same seed
    )


def _metrics(cluster: Cluster, trial_id: int, group: str) -> dict[int, dict[str, Any]]:
    """Steps → metrics; a later report at the same step supersedes an earlier one."""
    rows = cluster.get(f"/trials/{trial_id}/metrics", group=group)["metrics"]
    return {m["steps_completed"]: m["metrics"] for m in rows}


@pytest.mark.timeout(900)  # two experiments of two workers that each import DeepSpeed
def test_deepspeed_trial_checkpoints_pauses_and_resumes_with_the_same_numbers(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)

    # The reference: never stopped.
    ref_id = submit(cluster, _trial_config(cluster, sleep=0.0), SCRIPTS)
    d = cluster.wait_experiment(ref_id, TERMINAL, timeout=400)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(ref_id)
    (ref,) = d["trials"]
    ref_train = _metrics(cluster, ref["id"], "training")
    ref_val = _metrics(cluster, ref["id"], "validation")
    assert sorted(ref_train) == list(range(4, 41, 4)) and sorted(ref_val) == [8, 16, 24, 32, 40]
    assert ref_train[40]["loss"] < ref_train[4]["loss"]  # it learns
    ckpts = cluster.get(f"/trials/{ref['id']}/checkpoints")["checkpoints"]
    assert {c["steps_completed"] for c in ckpts} == {8, 16, 24, 32, 40}
    last = next(c for c in ckpts if c["uuid"] == ref["latest_checkpoint"])
    # engine.save_checkpoint wrote both ranks' ZeRO shards, the chief the loop's state.
    files = set(last["resources"])
    assert {
        "model0/mp_rank_00_model_states.pt",
        "model0/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "model0/zero_pp_rank_1_mp_rank_00_optim_states.pt",
        "det_state.pt",
    } <= files, files
    assert last["metadata"]["format"] == "harness.pytorch.deepspeed/1"

    # The same trial, paused once it has a checkpoint (at 8; two workers look for the signal
    # every 10 batches, so it stops at 10, 20 or 30) and resumed from the pause's checkpoint.
    exp_id = submit(cluster, _trial_config(cluster, sleep=0.4), SCRIPTS)
    trial_id = cluster.experiment(exp_id)["trials"][0]["id"]
    first = cluster.wait_trial(
        trial_id,
        lambda t: t["latest_checkpoint"] is not None or t["state"] in TERMINAL,
        timeout=400,
    )
    assert first["state"] not in TERMINAL, "\n".join(cluster.logs(trial_id))[-4000:]
    cluster.det("experiment", "pause", str(exp_id))
    cluster.wait_trial(
        trial_id, lambda t: t["state"] == "PAUSED" and t["allocation_id"] is None, timeout=180
    )
    paused = cluster.get(f"/trials/{trial_id}")["trial"]
    assert 0 < paused["steps_completed"] < 40, paused
    cluster.det("experiment", "activate", str(exp_id))
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=400)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (trial,) = d["trials"]
    assert trial["steps_completed"] == 40 and trial["restarts"] == 0
    logs = "\n".join(cluster.logs(trial_id))
    assert f"resumed from checkpoint {paused['latest_checkpoint']}" in logs
    assert _metrics(cluster, trial_id, "training") == ref_train
    assert _metrics(cluster, trial_id, "validation") == ref_val
    assert trial["best_validation"] == ref["best_validation"]


@pytest.mark.timeout(600)
def test_launch_deepspeed_runs_a_core_api_script(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    text = config(
        cluster,
        {"name": "single"},
        {"steps": 5},
        entrypoint="python3 -m determined.launch.deepspeed -- python3 ds_core_script.py",
        resources={"slots_per_trial": 2},
        max_restarts=0,
    )
    exp_id = submit(cluster, text, SCRIPTS)
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=400)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (trial,) = d["trials"]
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "deepspeed ranks [0, 1] world 2" in logs
    assert trial["steps_completed"] == 5
    (ckpt,) = cluster.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert f"checkpoint {ckpt['uuid']} at 5" in logs
    assert {
        "ds/mp_rank_00_model_states.pt",
        "ds/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "ds/zero_pp_rank_1_mp_rank_00_optim_states.pt",
    } <= set(ckpt["resources"])
    train = _metrics(cluster, trial["id"], "training")
    assert list(train) == [5] and train[5]["loss"] >= 0


@pytest.mark.timeout(600)
def test_deepspeed_trainer_api_as_determineds_dcgan_example(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    text = config(
        cluster,
        {"name": "single", "metric": "val_loss"},
        {"lr": 0.05, "batches": 8},
        entrypoint=[
            "python3",
            "-m",
            "determined.launch.deepspeed",
            "python3",
            "ds_trainer_script.py",
        ],
        resources={"slots_per_trial": 2},
        max_restarts=0,
    )
    exp_id = submit(cluster, text, SCRIPTS)
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=400)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (trial,) = d["trials"]
    assert trial["steps_completed"] == 8
    assert sorted(_metrics(cluster, trial["id"], "training")) == [2, 4, 6, 8]
    assert sorted(_metrics(cluster, trial["id"], "validation")) == [4, 8]
    ckpts = cluster.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert {c["steps_completed"] for c in ckpts} == {4, 8}
