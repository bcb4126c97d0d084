"""Off the cluster (only the import line changed: `from harness import pytorch`), Determined
0.38's Trainer API trains, validates, checkpoints and resumes locally; chief-only checkpoints
refuse a non-chief caller without entering any collective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from harness import core, pytorch


def _data(n: int, seed: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))


class Tiny(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: dict[str, Any]) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(3, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), hparams["lr"]))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(_data(32, 0), batch_size=4)  # 8 batches per epoch

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(_data(8, 1), batch_size=4)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import os

    for key in list(os.environ):
        if key.startswith("DET_") or key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fit(**kw: Any) -> pytorch.TrialResult:
    with pytorch.init(hparams={"lr": 0.05}, exp_conf={"searcher": {"metric": "loss"}}) as ctx:
        trial = Tiny(ctx, ctx.get_hparams())
        return pytorch.Trainer(trial, ctx).fit(**kw)


def test_trainer_trains_to_epoch_and_batch_lengths_and_resumes(offline: Path) -> None:
    first = fit(
        max_length=pytorch.Batch(10),
        validation_period=pytorch.Epoch(1),
        checkpoint_period=pytorch.Batch(5),
        reporting_period=pytorch.Batch(2),
    )
    assert first.batches_trained == 10
    assert [s for s, _ in first.validation] == [8, 10]
    assert len(first.checkpoints) == 2  # at 5 and 10
    assert [s for s, _ in first.training] == [2, 4, 6, 8, 10]
    assert all((offline / "checkpoints" / u).is_dir() for u in first.checkpoints)

    second = fit(
        max_length=pytorch.Epoch(2),
        validation_period=pytorch.Epoch(1),
        latest_checkpoint=first.checkpoints[-1],
        reporting_period=pytorch.Batch(2),
    )
    assert second.batches_trained == 16
    assert [s for s, _ in second.training] == [12, 14, 16]  # resumed at batch 10
    assert [s for s, _ in second.validation] == [16]


def test_fit_needs_a_length_off_the_cluster(offline: Path) -> None:
    with pytest.raises(ValueError, match="needs max_length"):
        fit()
    with pytest.raises(TypeError, match="pytorch.Batch"):
        fit(max_length=2.5)


def test_units_compare_by_kind_and_value() -> None:
    assert pytorch.Epoch(2) == pytorch.Epoch(2) != pytorch.Batch(2)
    with pytest.raises(ValueError):
        pytorch.Batch(-1)


class _NoCollectives:
    def allgather(self, obj: Any) -> list[Any]:
        raise AssertionError("a chief-only upload must not enter a collective")

    broadcast = gather = allgather


def test_non_chief_store_path_gets_determineds_error(offline: Path) -> None:
    dist = core.DistributedContext(rank=1, size=2, backend=_NoCollectives())
    ctx = core.init(distributed=dist, checkpoint_storage=str(offline / "ckpts"))
    chief_only = pytest.raises(RuntimeError, match="only be called on the chief")
    with chief_only, ctx.checkpoint.store_path({"steps_completed": 1}):
        pass
    with pytest.raises(RuntimeError, match="only be called on the chief"):
        ctx.checkpoint.upload(offline, {"steps_completed": 1})
