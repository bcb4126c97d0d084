"""A small PyTorch MLP on scikit-learn's handwritten digits, written against detlab's Core API.

Runs on the cluster (`det experiment create const.yaml .`) and off-cluster
(`DET_MAX_LENGTH=1000 python3 train.py`): off-cluster `harness.get_cluster_info()` is None, the
default hyperparameters are used, metrics go to the log and checkpoints to ./checkpoints.

What it shows:
- hyperparameters and the trial seed from the cluster info,
- searcher operations whose length counts batches,
- training metrics every 10 batches (and a "training loss" log line every 50), validation every 100
  batches and at the end of each operation,
- a checkpoint (model + optimizer + batches trained) at the end of each operation and on preemption,
- resuming from the latest checkpoint, where the batch count carries on.
"""

from __future__ import annotations

import logging
import pathlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import harness as det

DEFAULT_HPARAMS: dict[str, Any] = {
    "learning_rate": 0.01,
    "hidden_size": 64,
    "dropout": 0.1,
    "batch_size": 32,
}
SPLIT_SEED = 0  # the same train/validation split for every trial, whatever its seed
REPORT_EVERY = 10  # batches between training-metric reports
VALIDATE_EVERY = 100  # batches between validations
LOG_EVERY = 50  # batches between "training loss" lines in the trial's log
CHECKPOINT_FILE = "state.pt"

Batch = tuple[torch.Tensor, torch.Tensor]


def load_data() -> tuple[Batch, Batch]:
    """The 1,797 8x8 digit images bundled with scikit-learn, split 80/20 (stratified, fixed)."""
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32) / 16.0  # pixel values are 0..16
    x_tr, x_va, y_tr, y_va = train_test_split(
        x, y, test_size=0.2, random_state=SPLIT_SEED, stratify=y
    )
    return (
        (torch.from_numpy(x_tr), torch.from_numpy(y_tr)),
        (torch.from_numpy(x_va), torch.from_numpy(y_va)),
    )


def build_model(hidden_size: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, hidden_size),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden_size, 10),
    )


def batches(data: Batch, batch_size: int, seed: int, start: int) -> Iterator[Batch]:
    """Endless shuffled batches, starting at batch number `start`.

    Each epoch's order depends only on (seed, epoch), so a trial resumed from a checkpoint sees
    exactly the batches it would have seen had it never stopped.
    """
    x, y = data
    per_epoch = len(x) // batch_size  # drop the last, incomplete batch
    epoch, offset = divmod(start, per_epoch)
    while True:
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed + epoch))
        for i in range(offset, per_epoch):
            idx = order[i * batch_size : (i + 1) * batch_size]
            yield x[idx], y[idx]
        epoch, offset = epoch + 1, 0


@torch.no_grad()
def validate(model: nn.Module, data: Batch) -> dict[str, float]:
    model.eval()
    x, y = data
    logits = model(x)  # 360 images: one batch is enough
    model.train()
    return {
        "validation_loss": nn.functional.cross_entropy(logits, y).item(),
        "validation_accuracy": (logits.argmax(dim=1) == y).float().mean().item(),
    }


def save_checkpoint(
    core: det.core.Context, model: nn.Module, optimizer: torch.optim.Optimizer, n: int
) -> int:
    """Store model, optimizer and batch count; `steps_completed` tells the master how far."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "batches": n}
    with core.checkpoint.store_path({"steps_completed": n}) as (path, _uuid):
        torch.save(state, pathlib.Path(path) / CHECKPOINT_FILE)
    return n


def load_checkpoint(
    core: det.core.Context, uuid: str, model: nn.Module, optimizer: torch.optim.Optimizer
) -> int:
    """Restore model and optimizer from checkpoint `uuid`; returns the batches trained."""
    with core.checkpoint.restore_path(uuid) as path:
        state = torch.load(pathlib.Path(path) / CHECKPOINT_FILE)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["batches"])


def main() -> None:
    info = det.get_cluster_info()
    hparams = {**DEFAULT_HPARAMS, **(info.trial.hparams if info else {})}
    seed = info.trial.trial_seed if info else 0
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    # A model this small trains fastest on one thread, and leaves the other cores to other trials.
    torch.set_num_threads(1)
    logging.info("hparams %s, seed %s", hparams, seed)

    train_data, val_data = load_data()
    model = build_model(int(hparams["hidden_size"]), float(hparams["dropout"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=float(hparams["learning_rate"]))
    loss_fn = nn.CrossEntropyLoss()

    with det.core.init() as core:
        trained = 0  # batches trained so far, across restarts
        if info and info.latest_checkpoint:
            trained = load_checkpoint(core, info.latest_checkpoint, model, optimizer)
            logging.info("resumed from %s at batch %d", info.latest_checkpoint, trained)
        saved_at = trained  # batches trained at the last checkpoint

        data = batches(train_data, int(hparams["batch_size"]), seed, start=trained)
        running_loss, running_n = 0.0, 0
        log_loss, log_n = 0.0, 0
        model.train()
        for op in core.searcher.operations():
            # op.length is the total number of batches this trial should have trained.
            while trained < op.length:
                x, y = next(data)
                loss = loss_fn(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                trained += 1
                running_loss, running_n = running_loss + loss.item(), running_n + 1
                log_loss, log_n = log_loss + loss.item(), log_n + 1
                if trained % LOG_EVERY == 0:
                    logging.info(
                        "batch %d/%d: training loss %.4f", trained, op.length, log_loss / log_n
                    )
                    log_loss, log_n = 0.0, 0

                if trained % REPORT_EVERY == 0:
                    core.train.report_training_metrics(trained, {"loss": running_loss / running_n})
                    running_loss, running_n = 0.0, 0
                    op.report_progress(trained)
                    # Cheap: a background thread long-polls the master and sets a flag.
                    if core.preempt.should_preempt():
                        if trained != saved_at:
                            save_checkpoint(core, model, optimizer, trained)
                        logging.info("preempted at batch %d; checkpointed, exiting", trained)
                        return
                if trained % VALIDATE_EVERY == 0 and trained < op.length:
                    core.train.report_validation_metrics(trained, validate(model, val_data))

            metrics = validate(model, val_data)
            core.train.report_validation_metrics(trained, metrics)
            if trained != saved_at:
                saved_at = save_checkpoint(core, model, optimizer, trained)
            op.report_completed(metrics["validation_accuracy"])
            logging.info("batch %d: %s", trained, metrics)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()
