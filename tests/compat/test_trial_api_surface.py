"""Determined 0.38's Trial API surface beyond the loop: PyTorchTrialContext's position and
mixed-precision methods, `load_trial_from_checkpoint_path`, `pytorch.samplers`,
`determined.util`/`determined.common.util`, and the clear errors for what detlab lacks."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from harness import core, pytorch
from tests.compat.test_alias import python
from tests.compat.test_trainer_local import _data, offline  # noqa: F401 - the fixture

SEEN: list[tuple[int, int, bool, bool, int]] = []


class Mixed(pytorch.PyTorchTrial):
    """Trains with a wrapped GradScaler and records where the loop is at each batch."""

    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: dict[str, Any]) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(3, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), hparams["lr"]))
        self.scaler = context.wrap_scaler(torch.amp.GradScaler("cpu"))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(_data(32, 0), batch_size=4)  # 8 batches per epoch

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(_data(8, 1), batch_size=4)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        c = self.context
        assert c.current_train_batch() == batch_idx and c.current_train_epoch() == epoch_idx
        SEEN.append(
            (batch_idx, epoch_idx, c.is_epoch_start(), c.is_epoch_end(), c.get_initial_batch())
        )
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        c.backward(self.scaler.scale(loss))
        c.step_optimizer(self.opt, scaler=self.scaler)
        self.scaler.update()
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}


def fit(latest: str | None = None, **kw: Any) -> tuple[pytorch.TrialResult, Mixed]:
    with pytorch.init(hparams={"lr": 0.05}, exp_conf={"searcher": {"metric": "loss"}}) as ctx:
        trial = Mixed(ctx, ctx.get_hparams())
        return pytorch.Trainer(trial, ctx).fit(latest_checkpoint=latest, **kw), trial


def test_position_scaler_and_loading_a_trial_from_its_checkpoint(offline: Path) -> None:  # noqa: F811
    SEEN.clear()
    result, trial = fit(max_length=pytorch.Batch(10), checkpoint_period=pytorch.Batch(10))
    starts = [b for b, _, start, _, _ in SEEN if start]
    ends = [b for b, _, _, end, _ in SEEN if end]
    assert [b for b, *_ in SEEN] == list(range(10)) and starts == [0, 8] and ends == [7]
    assert {initial for *_, initial in SEEN} == {0}
    assert trial.scaler.get_scale() > 0
    ckpt = offline / "checkpoints" / result.checkpoints[-1]

    # Resumed: the loop starts at batch 10 and the scaler's state comes back.
    SEEN.clear()
    before = trial.scaler.state_dict()
    _, again = fit(latest=result.checkpoints[-1], max_length=pytorch.Batch(12))
    assert [b for b, *_ in SEEN] == [10, 11] and {i for *_, i in SEEN} == {10}
    assert again.scaler.state_dict()["_growth_tracker"] >= before["_growth_tracker"]

    # Loaded for inference: same class (named in the checkpoint), hparams and weights.
    loaded = pytorch.load_trial_from_checkpoint_path(str(ckpt))
    assert type(loaded).__name__ == "Mixed" and loaded.context.get_hparams() == {"lr": 0.05}
    for a, b in zip(loaded.model.parameters(), trial.model.parameters(), strict=True):
        assert torch.equal(a, b)
    explicit = pytorch.load_trial_from_checkpoint_path(ckpt, trial_class=Mixed)
    assert torch.equal(explicit.model.weight, trial.model.weight)
    with pytest.raises(FileNotFoundError, match="not a PyTorchTrial checkpoint"):
        pytorch.load_trial_from_checkpoint_path(offline)


def test_clear_errors_for_what_detlab_lacks(offline: Path) -> None:  # noqa: F811
    with pytorch.init(hparams={"lr": 0.05}) as ctx:
        # TensorBoard (docs/tensorboard.md): a real SummaryWriter on the worker's directory.
        writer = ctx.get_tensorboard_writer()
        assert writer is ctx.get_tensorboard_writer()
        assert writer.log_dir == str(ctx.get_tensorboard_path())
        writer.add_scalar("x", 1.0, 1)
        writer.flush()
        assert any(
            p.name.startswith("events.out.tfevents") for p in ctx.get_tensorboard_path().iterdir()
        )
        writer.close()
        shutil.rmtree(ctx.get_tensorboard_path().parent)  # /tmp/tensorboard-local-<pid>-0
        with pytest.raises(RuntimeError, match="training hasn't started"):
            ctx.current_train_batch()
        with pytest.raises(NotImplementedError, match="Apex AMP is not supported"):
            ctx.configure_apex_amp(models=None, optimizers=None)
    with core.init() as core_context:
        assert core_context.train.get_experiment_best_validation() is None  # off the cluster
        with pytest.raises(NotImplementedError, match="run metadata"):
            core_context.train.set_metadata({"a": 1})


def test_distributed_batch_sampler_shards_batches() -> None:
    batches = torch.utils.data.BatchSampler(range(10), batch_size=3, drop_last=False)
    shards = [pytorch.samplers.DistributedBatchSampler(batches, 2, r) for r in (0, 1)]
    assert [list(s) for s in shards] == [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9]]]
    assert [len(s) for s in shards] == [2, 2]
    three = [len(pytorch.samplers.DistributedBatchSampler(batches, 3, r)) for r in range(3)]
    assert three == [2, 1, 1]
    with pytest.raises(ValueError, match="rank"):
        pytorch.samplers.DistributedBatchSampler(batches, 2, 2)
    skipped = pytorch.samplers.SkipBatchSampler(batches, 3)
    assert list(skipped) == [[9]] and len(skipped) == 1


def test_determined_util_names_and_unsupported_batch_inference() -> None:
    r = python(
        "from determined import util as det_util\n"
        "from determined.common import util\n"
        "from determined.pytorch import samplers, load_trial_from_checkpoint_path\n"
        "base, over = {'a': {'b': 1, 'c': 2}, 'd': 1}, {'a': {'c': 3}, 'e': {'f': 1}}\n"
        "m = det_util.merge_dicts(base, over)\n"
        "assert m == {'a': {'b': 1, 'c': 3}, 'd': 1, 'e': {'f': 1}}, m\n"
        "assert base == {'a': {'b': 1, 'c': 2}, 'd': 1}\n"
        "assert (util._LEGACY_TRAINING, util._LEGACY_VALIDATION) == ('training', 'validation')\n"
        "assert samplers.DistributedBatchSampler\n"
        "print('ok')\n"
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    for form in (
        "from determined.pytorch import experimental",
        "from determined.pytorch.experimental import torch_batch_process",
    ):
        r = python(form)
        assert r.returncode == 1
        assert "batch inference (torch_batch_process) is not supported" in r.stderr, r.stderr
