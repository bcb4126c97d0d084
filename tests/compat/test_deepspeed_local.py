"""DeepSpeedTrial off-cluster (`run_trial`, one CPU worker, each run in its own process): a batch
is `gradient_accumulation_steps` micro batches, a run resumed from a mid-run checkpoint reports
the numbers of one that never stopped, and misuse gets a clear message; the launcher's
environment and `overwrite_deepspeed_config`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.runtime.process import alias_dir, harness_root
from harness.launch._spawn import Workers
from harness.launch.deepspeed import deepspeed_env
from tests.cluster import ROOT
from tests.compat._util import SCRIPTS

RUN = """
import json, sys
import ds_trial
from harness.pytorch import run_trial
args = json.loads(sys.argv[1])
cfg = {"searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 12}},
       "scheduling_unit": 4, "min_checkpoint_period": {"batches": 6}}
r = run_trial(ds_trial.RegressionTrial, hparams=args["hparams"], config=cfg,
              checkpoint_dir=args["dir"], latest_checkpoint=args.get("latest"))
print("RESULT " + json.dumps({"training": r.training, "validation": r.validation,
                              "checkpoints": r.checkpoints}))
"""


def _run(code: str, arg: dict, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), alias_dir(harness_root()), str(SCRIPTS)])
    return subprocess.run(
        [sys.executable, "-c", code, json.dumps(arg)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _result(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, r.stderr[-4000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_accumulation_checkpoints_and_an_exact_resume(tmp_path: Path) -> None:
    hp = {"lr": 0.05, "overwrite_deepspeed_args": {"gradient_accumulation_steps": 2}}
    full = _result(_run(RUN, {"hparams": hp, "dir": str(tmp_path)}, tmp_path))
    assert [s for s, _ in full["training"]] == [4, 8, 12]
    first, last = full["checkpoints"]
    state = json.loads((tmp_path / first / "metadata.json").read_text())
    assert state["steps_completed"] == 6 and state["epoch"] == 0
    # 256 samples in micro batches of 4 = 64 micro batches: 32 batches of 2 per epoch.
    load = json.loads((tmp_path / last / "load_data.json").read_text())
    assert load["trial_type"] == "DeepSpeedTrial" and load["batches_trained"] == 12
    assert (tmp_path / first / "model0" / "mp_rank_00_model_states.pt").is_file()
    resumed = _result(_run(RUN, {"hparams": hp, "dir": str(tmp_path), "latest": first}, tmp_path))
    assert resumed["training"] == full["training"][1:]  # batches 8 and 12, the same numbers
    assert resumed["validation"] == full["validation"]


MISUSE = """
import json, sys
import deepspeed, torch
from determined.pytorch import DataLoader, deepspeed as det_ds
from harness.pytorch import run_trial

class Trial(det_ds.DeepSpeedTrial):
    def __init__(self, context):
        self.context = context
        what = context.get_hparam("what")
        model = torch.nn.Linear(2, 1)
        if what == "wrap_optimizer":
            context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        if what != "no_engine":
            config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                      "optimizer": {"type": "Adam", "params": {"torch_adam": True}}}
            engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                              config=config)
            context.wrap_model_engine(engine)
    def build_training_data_loader(self):
        return DataLoader(torch.utils.data.TensorDataset(torch.ones(8, 2)), batch_size=2)
    def build_validation_data_loader(self):
        return self.build_training_data_loader()
    def train_batch(self, it, epoch_idx, batch_idx):
        for _ in range(3):  # takes more micro batches than its own: runs out at epoch's end
            next(it)
        return {}
    def evaluate_batch(self, it, batch_idx):
        return {}

cfg = {"searcher": {"name": "single", "max_length": {"batches": 4}}}
run_trial(Trial, hparams={"what": json.loads(sys.argv[1])}, config=cfg, checkpoint_dir=".")
"""


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("wrap_optimizer", "DeepSpeedTrialContext has no wrap_optimizer"),
        ("no_engine", "registered no model engine: call context.wrap_model_engine"),
        ("greedy", "the training data loader ran out in batch 0 (epoch 0)"),
    ],
)
def test_misuse_is_named(tmp_path: Path, what: str, message: str) -> None:
    r = _run(MISUSE, what, tmp_path)  # type: ignore[arg-type]
    assert r.returncode != 0
    assert message in r.stderr, r.stderr[-3000:]


def test_the_launcher_adds_deepspeeds_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    w = Workers(
        nproc=2,
        base_rank=2,
        world_size=4,
        container_rank=1,
        num_containers=2,
        master_addr="10.0.0.1",
        master_port=29400,
    )
    env = deepspeed_env(w, gpus=False)
    assert env == {"LOCAL_SIZE": "2", "CROSS_RANK": "1", "CROSS_SIZE": "2", "DS_ACCELERATOR": "cpu"}
    assert "DS_ACCELERATOR" not in deepspeed_env(w, gpus=True)
    # torchrun's names come from the torch_distributed launcher's plan, unchanged.
    assert w.env(1)["RANK"] == "3" and w.env(1)["LOCAL_RANK"] == "1"


def test_overwrite_deepspeed_config(tmp_path: Path) -> None:
    from harness.pytorch.deepspeed import overwrite_deepspeed_config

    base = {"train_batch_size": 16, "zero_optimization": {"stage": 1, "overlap_comm": True}}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(base))
    for given in (base, str(path)):
        out = overwrite_deepspeed_config(given, {"zero_optimization": {"stage": 2}})
        assert out == {
            "train_batch_size": 16,
            "zero_optimization": {"stage": 2, "overlap_comm": True},
        }
    assert base["zero_optimization"]["stage"] == 1  # the input is unchanged
    with pytest.raises(TypeError, match="a path or a dict, not int"):
        overwrite_deepspeed_config(3, {})  # type: ignore[arg-type]


def test_the_trial_entrypoint_form_runs_two_workers(tmp_path: Path) -> None:
    """`entrypoint: ds_trial:RegressionTrial` (no DeepSpeed launcher): harness.launch's
    torch.distributed workers are enough for DeepSpeed (ZeRO-1: each writes its shard)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "DS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), alias_dir(harness_root()), str(SCRIPTS)])
    env["DET_HPARAMS"] = json.dumps(
        {"lr": 0.05, "overwrite_deepspeed_args": {"zero_optimization": {"stage": 1}}}
    )
    env["DET_EXPERIMENT_CONFIG"] = json.dumps(
        {"searcher": {"name": "single", "max_length": {"batches": 4}}, "scheduling_unit": 2}
    )
    r = subprocess.run(
        [sys.executable, "-m", "harness.launch", "--nproc", "2", "ds_trial:RegressionTrial"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    assert "searcher operation (length 4) completed" in r.stdout + r.stderr
    (ckpt,) = (tmp_path / "checkpoints").iterdir()
    shards = {p.name for p in (ckpt / "model0").iterdir()}
    assert {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)} <= shards, shards
