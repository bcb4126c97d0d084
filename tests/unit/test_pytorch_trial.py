"""harness.pytorch: loop lengths, exact resume, determinism, 2-worker gradient averaging, crashes.

The trials below are also run by the launcher in subprocesses as
`tests.unit.test_pytorch_trial:LinearTrial` (the repository root is on PYTHONPATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from flask import jsonify, request
from torch import nn
from torch.utils.data import TensorDataset

from harness import pytorch
from harness.api.testing import FakeMaster
from harness.pytorch._data import ShardedBatchSampler

ROOT = Path(__file__).resolve().parents[2]
CALLS: list[tuple[int, int]] = []  # (epoch_idx, batch_idx) of every train_batch, in this process
HOOK: dict[str, Any] = {}  # test hooks: {"at": batch_idx, "do": callable}


def make_data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    w = torch.arange(1.0, 9.0)
    y = x @ w + 0.1 * torch.randn(n, generator=g)
    return TensorDataset(x, y.unsqueeze(1))


class LinearTrial(pytorch.PyTorchTrial):
    """A small MLP regression with dropout, momentum, an LR schedule and RNG use per batch."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        torch.set_num_threads(1)
        hp = context.get_hparams()
        self.noise = bool(hp.get("noise", True))
        self.crash_rank = hp.get("crash_rank")
        self.crash_at = int(hp.get("crash_at", -1))
        self.model = context.wrap_model(
            nn.Sequential(
                nn.Linear(8, 16), nn.ReLU(), nn.Dropout(float(hp.get("dropout", 0.2))),
                nn.Linear(16, 1),
            )
        )  # fmt: skip
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=float(hp.get("lr", 0.01)), momentum=0.9)
        )
        context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.opt, step_size=7, gamma=0.9),
            pytorch.LRScheduler.StepMode.STEP_EVERY_BATCH,
        )

    def build_training_data_loader(self) -> pytorch.DataLoader:
        n = int(self.context.get_hparams().get("records", 160))
        return pytorch.DataLoader(
            make_data(n, 1), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(make_data(50, 2), batch_size=8)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        CALLS.append((epoch_idx, batch_idx))
        if HOOK.get("at") == batch_idx:
            HOOK["do"](self.context)
        if batch_idx == self.crash_at and self.crash_rank == self.context.distributed.rank:
            raise RuntimeError(f"boom at batch {batch_idx}")
        x, y = batch
        if self.noise:  # draws from the global RNG: resume must restore it
            x = x + 0.01 * torch.randn_like(x)
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss, "lr": self.opt.param_groups[0]["lr"]}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"val_loss": nn.functional.mse_loss(self.model(x), y)}


HPARAMS = {"global_batch_size": 16, "lr": 0.01, "dropout": 0.2}


def config(**over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 40}},
        "scheduling_unit": 10,
        "min_validation_period": {"batches": 10},
    }
    cfg.update(over)
    return cfg


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for k in list(os.environ):
        if k.startswith("DET_") or k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
            monkeypatch.delenv(k)
    CALLS.clear()
    HOOK.clear()
    yield
    HOOK.clear()


def state_of(ckpt_dir: Path, uuid: str) -> dict[str, Any]:
    return torch.load(ckpt_dir / uuid / "state.pt", weights_only=False)


# -- lengths ---------------------------------------------------------------------------------
def test_to_batches() -> None:
    kw = {"global_batch_size": 16, "records_per_epoch": 100}
    assert pytorch.to_batches({"batches": 7}, **kw) == 7
    assert pytorch.to_batches({"records": 320}, **kw) == 20
    assert pytorch.to_batches({"records": 330}, **kw) == 21  # at least that many records
    assert pytorch.to_batches({"epochs": 2}, **kw) == 13
    assert pytorch.to_batches(5, unit="records", **kw) == 1
    assert pytorch.to_batches(None, **kw) is None
    with pytest.raises(ValueError, match="records_per_epoch"):
        pytorch.to_batches({"epochs": 1}, global_batch_size=16, records_per_epoch=None)


@pytest.mark.parametrize(
    ("max_length", "extra", "batches"),
    [
        ({"batches": 23}, {}, 23),
        ({"records": 320}, {}, 20),
        ({"epochs": 3}, {"records_per_epoch": 160}, 30),
    ],
)
def test_trains_exactly_the_searcher_length(
    tmp_path: Path, max_length: dict[str, int], extra: dict[str, Any], batches: int
) -> None:
    cfg = config(searcher={"metric": "val_loss", "max_length": max_length}, **extra)
    res = pytorch.run_trial(LinearTrial, hparams=HPARAMS, config=cfg, checkpoint_dir=tmp_path)
    assert res.batches_trained == batches
    assert [b for _, b in CALLS] == list(range(batches))
    assert [e for e, _ in CALLS] == [b // 10 for b in range(batches)]  # 160 records / 16
    want_train = sorted({*range(10, batches + 1, 10), batches})
    assert [s for s, _ in res.training] == want_train
    assert [s for s, _ in res.validation] == want_train  # min_validation_period 10 + the end
    assert state_of(tmp_path, res.checkpoints[-1])["batches_trained"] == batches


def test_checkpoint_period_and_lr_schedule(tmp_path: Path) -> None:
    cfg = config(min_checkpoint_period={"batches": 15})
    res = pytorch.run_trial(LinearTrial, hparams=HPARAMS, config=cfg, checkpoint_dir=tmp_path)
    steps = [state_of(tmp_path, u)["batches_trained"] for u in res.checkpoints]
    assert steps == [15, 30, 40]
    lrs = dict(res.training)
    assert lrs[10]["lr"] == pytest.approx(sum(0.01 * 0.9 ** (b // 7) for b in range(10)) / 10)


# -- data ------------------------------------------------------------------------------------
def test_sharded_batches_together_are_the_single_worker_batches() -> None:
    single = ShardedBatchSampler(100, 16, shuffle=True, drop_last=False, seed=3)
    shards = [
        ShardedBatchSampler(100, 8, shuffle=True, drop_last=False, seed=3, rank=r, size=2)
        for r in range(2)
    ]
    for s in (single, *shards):
        s.set_epoch(4)
    one = list(single)
    two = [list(s) for s in shards]
    assert len(one) == len(two[0]) == len(two[1]) == 7
    for j in range(6):  # the last batch is padded with repeated records
        assert sorted(two[0][j] + two[1][j]) == sorted(one[j])
    single.set_epoch(4, skip=5)
    assert list(single) == one[5:]
    single.set_epoch(5)
    assert list(single) != one  # a new order every epoch


def test_plain_torch_data_loader_is_adopted(tmp_path: Path) -> None:
    class Plain(LinearTrial):
        def build_training_data_loader(self) -> Any:
            return torch.utils.data.DataLoader(make_data(160, 1), batch_size=16, shuffle=True)

    a = pytorch.run_trial(Plain, hparams=HPARAMS, config=config(), checkpoint_dir=tmp_path)
    b = pytorch.run_trial(Plain, hparams=HPARAMS, config=config(), checkpoint_dir=tmp_path)
    assert a.training == b.training and a.validation == b.validation


# -- determinism -----------------------------------------------------------------------------
def test_same_seed_same_metrics_other_seed_other_metrics(tmp_path: Path) -> None:
    runs = [
        pytorch.run_trial(
            LinearTrial, hparams=HPARAMS, config=config(), trial_seed=s, checkpoint_dir=tmp_path
        )
        for s in (7, 7, 8)
    ]
    assert runs[0].training == runs[1].training and runs[0].validation == runs[1].validation
    assert runs[0].training != runs[2].training


# -- exact resume through a (fake) master: preempted at batch 18, resumed, same numbers --------
class Master:
    def __init__(self, fake: FakeMaster, length: int) -> None:
        self.length = length
        self.done = False
        self.preempt = threading.Event()
        self.metrics: list[dict[str, Any]] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}
        app = fake.app

        @app.get("/api/v1/trials/5/searcher/operation")
        def op() -> Any:
            if self.done:
                return jsonify(operation=None, completed=True)
            return jsonify(operation={"length": self.length}, completed=False)

        @app.post("/api/v1/trials/5/searcher/completed_operation")
        def completed() -> Any:
            self.done = True
            return jsonify({})

        @app.post("/api/v1/trials/5/metrics")
        def metrics() -> Any:
            self.metrics.extend(request.get_json()["reports"])
            return jsonify(accepted=len(request.get_json()["reports"]))

        @app.post("/api/v1/trials/5/progress")
        def progress() -> Any:
            return jsonify({})

        @app.get("/api/v1/allocations/<aid>/preemption")
        def preemption(aid: str) -> Any:
            self.preempt.wait(min(float(request.args.get("timeout", 30)), 0.2))
            return jsonify(preempt=self.preempt.is_set())

        @app.post("/api/v1/allocations/<aid>/ack_preemption")
        def ack(aid: str) -> Any:
            return jsonify({})

        @app.post("/api/v1/checkpoints")
        def register() -> Any:
            body = request.get_json()
            self.checkpoints[body["uuid"]] = body
            return jsonify(checkpoint=body), 201

    def reports(self) -> list[tuple[str, int, dict[str, Any]]]:
        return [(m["group"], m["steps_completed"], m["metrics"]) for m in self.metrics]


def on_cluster(
    monkeypatch: pytest.MonkeyPatch, fake: FakeMaster, ckpts: Path, alloc: str, latest: str = ""
) -> None:
    cfg = config(checkpoint_storage={"type": "shared_fs", "host_path": str(ckpts)})
    env = {
        "DET_MASTER": fake.url,
        "DET_SESSION_TOKEN": "t",
        "DET_TRIAL_ID": "5",
        "DET_EXPERIMENT_ID": "2",
        "DET_ALLOCATION_ID": alloc,
        "DET_TRIAL_SEED": "11",
        "DET_HPARAMS": json.dumps(HPARAMS),
        "DET_EXPERIMENT_CONFIG": json.dumps(cfg),
        "DET_LATEST_CHECKPOINT": latest,
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)


# Stopped mid-period (after batch 18) and on a report and validation boundary (after batch 20:
# the boundary's report and validation happen before the stop, as in the uninterrupted run).
@pytest.mark.parametrize(
    ("hook_at", "stopped_at", "reported"), [(17, 18, [10, 10]), (19, 20, [10, 10, 20, 20])]
)
def test_paused_and_resumed_trial_reports_what_an_uninterrupted_one_does(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hook_at: int,
    stopped_at: int,
    reported: list[int],
) -> None:
    with FakeMaster() as fake:
        straight = Master(fake, 40)
        on_cluster(monkeypatch, fake, tmp_path / "a", "a-1")
        res_a = pytorch.run_trial(LinearTrial)
    assert not res_a.preempted and res_a.batches_trained == 40

    with FakeMaster() as fake:
        paused = Master(fake, 40)

        def pause(context: pytorch.PyTorchTrialContext) -> None:
            paused.preempt.set()  # the master asks the trial to stop (det experiment pause)
            assert context.core.preempt._watcher.flag.wait(5)

        HOOK.update(at=hook_at, do=pause)
        on_cluster(monkeypatch, fake, tmp_path / "b", "b-1")
        res_b1 = pytorch.run_trial(LinearTrial)
        assert res_b1.preempted and res_b1.batches_trained == stopped_at
        assert any(c.path.endswith("ack_preemption") for c in fake.calls)
        assert [m["steps_completed"] for m in paused.metrics] == reported
        (uuid,) = paused.checkpoints
        assert paused.checkpoints[uuid]["steps_completed"] == stopped_at
        HOOK.clear()
        paused.preempt.clear()
        on_cluster(monkeypatch, fake, tmp_path / "b", "b-2", latest=uuid)
        res_b2 = pytorch.run_trial(LinearTrial)
    assert res_b2.batches_trained == 40
    assert paused.reports() == straight.reports()  # exactly equal, not approximately
    a = state_of(tmp_path / "a", res_a.checkpoints[-1])
    b = state_of(tmp_path / "b", res_b2.checkpoints[-1])
    for ka, kb in zip(a["models"][0].values(), b["models"][0].values(), strict=True):
        assert torch.equal(ka, kb)
    assert a["optimizers"][0]["state"][0]["momentum_buffer"].equal(
        b["optimizers"][0]["state"][0]["momentum_buffer"]
    )
    assert a["lr_schedulers"] == b["lr_schedulers"]


# -- the launcher: 2 gloo workers, crashes, user tracebacks --------------------------------------
def launch(
    tmp_path: Path, *args: str, hparams: dict[str, Any], cfg: dict[str, Any], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(
        PYTHONPATH=str(ROOT),
        DET_HPARAMS=json.dumps(hparams),
        DET_EXPERIMENT_CONFIG=json.dumps(cfg),
        DET_WORKER_KILL_GRACE="3",
    )
    return subprocess.run(
        [sys.executable, "-m", "harness.launch", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_two_workers_average_gradients_like_one_process_on_the_combined_batch(
    tmp_path: Path,
) -> None:
    hp = {**HPARAMS, "dropout": 0.0, "noise": False, "lr": 0.005}
    cfg = config(searcher={"metric": "val_loss", "max_length": {"batches": 25}})
    r = launch(
        tmp_path, "--nproc", "2", "tests.unit.test_pytorch_trial:LinearTrial", hparams=hp, cfg=cfg
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ranks 0..1 of 2" in r.stderr and "[rank=0]" in r.stderr
    (uuid,) = os.listdir(tmp_path / "checkpoints")
    two = state_of(tmp_path / "checkpoints", uuid)
    assert two["world_size"] == 2 and two["batches_trained"] == 25
    one = pytorch.run_trial(LinearTrial, hparams=hp, config=cfg, checkpoint_dir=tmp_path / "one")
    single = state_of(tmp_path / "one", one.checkpoints[-1])
    for k, v in single["models"][0].items():
        torch.testing.assert_close(two["models"][0][k], v, rtol=1e-4, atol=1e-5)
    # The shards of the validation set together are the whole set.
    marker = "validation metrics at 25 steps: "
    val = [
        json.loads(line.split(marker)[1].replace("'", '"'))
        for line in r.stderr.splitlines()
        if marker in line
    ]
    assert val and val[0]["val_loss"] == pytest.approx(one.validation[-1][1]["val_loss"], rel=1e-4)


def test_a_crashing_worker_stops_all_workers_with_its_traceback(tmp_path: Path) -> None:
    hp = {**HPARAMS, "crash_rank": 1, "crash_at": 5}
    r = launch(
        tmp_path,
        "--nproc",
        "2",
        "tests.unit.test_pytorch_trial:LinearTrial",
        hparams=hp,
        cfg=config(),
        timeout=120,
    )
    assert r.returncode == 1, r.stderr[-3000:]
    assert "[launcher] worker rank 1 exited with code 1" in r.stderr
    assert "[rank=1] RuntimeError: boom at batch 5" in r.stderr
    tb = [line for line in r.stderr.splitlines() if line.startswith("[rank=1]")]
    assert any("test_pytorch_trial.py" in line and "train_batch" in line for line in tb)
    assert not any("harness/pytorch/_controller.py" in line for line in tb), "\n".join(tb)


def test_user_error_in_one_process_shows_the_users_traceback(tmp_path: Path) -> None:
    hp = {**HPARAMS, "crash_rank": 0, "crash_at": 3}
    r = launch(tmp_path, "tests.unit.test_pytorch_trial:LinearTrial", hparams=hp, cfg=config())
    assert r.returncode == 1
    assert "Traceback (most recent call last):" in r.stderr
    assert "RuntimeError: boom at batch 3" in r.stderr
    assert 'test_pytorch_trial.py", line' in r.stderr
    assert "_controller.py" not in r.stderr.split("Traceback")[1]


def test_bad_entrypoint_is_reported(tmp_path: Path) -> None:
    r = launch(tmp_path, "tests.unit.test_pytorch_trial:Nope", hparams=HPARAMS, cfg=config())
    assert r.returncode == 1 and "has no 'Nope'" in r.stderr
