"""trial_throughput: samples/s of a model trained through PyTorchTrial vs a hand-written loop.

Both run in this process, on the same data and model, one after the other, several rounds
(interleaved, median per side), with one torch thread. The PyTorchTrial side is the whole
harness: `harness.pytorch.run_trial` off-cluster (Core API context, harness DataLoader with
seeded sharded shuffling, metric averaging with reports every `scheduling_unit` = 100 batches,
the preemption check); the hand-written side is `torch.utils.data.DataLoader(shuffle=True)` and
forward / backward / step, with the same per-batch work as the harness: it keeps each batch's
detached loss and turns them into a number every REPORT_EVERY batches (the harness's default
`scheduling_unit`), as a loop that logs its loss would. Throughput is measured over the training
batches after a warm-up (from batch WARMUP to the last), so start-up and the final validation and
checkpoint are not counted; every window holds at least two metric reports. Two clocks, both
compared: wall time (what the user waits for; blocked time counts) and CPU time of this process
(all its threads; steadier on a shared machine, but blind to blocking).

Models: the digits MLP of `examples/digits` (batch 32) and a synthetic CNN (3x32x32 inputs, three
conv layers, batch 64). Target: the trial reaches >= 98% of the hand-written loop's samples/s, in
wall time and in CPU time.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bench._report import Row, publish

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "digits"))

NAME = "trial_throughput"
TARGET = 0.98
WARMUP = 20
REPORT_EVERY = 100  # the harness's default scheduling_unit: a metric report every 100 batches
CNN_BATCHES = WARMUP + 2 * REPORT_EVERY + 20  # the measured window holds two reports

from harness import pytorch  # noqa: E402


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip


def cnn_data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 3, 32, 32, generator=g)
    return TensorDataset(x, torch.randint(0, 10, (2048,), generator=g))


def digits_model() -> nn.Module:
    from model_def import build_model

    return build_model(64, 0.1)


def digits_data() -> TensorDataset:
    from model_def import load_data

    return load_data()[0]


class Clock:
    """CPU time (of this process, all threads) and wall time from the first measured batch to
    the last; both are compared."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.c0 = self.c1 = self.w0 = self.w1 = 0.0

    def tick(self, batch_idx: int) -> None:
        if batch_idx == self.start:
            self.c0, self.w0 = time.process_time(), time.perf_counter()
        elif batch_idx == self.end:
            self.c1, self.w1 = time.process_time(), time.perf_counter()

    def rate(self, batch_size: int) -> tuple[float, float]:
        """(samples per CPU second, samples per wall second)."""
        n = (self.end - self.start) * batch_size
        return n / (self.c1 - self.c0), n / (self.w1 - self.w0)


def trial_class(
    model_fn: Callable[[], nn.Module], data: TensorDataset, clock: Any
) -> type[pytorch.PyTorchTrial]:
    """The benchmark's trial; `clock.tick(batch_idx)` is called at each training batch (also
    used by device_throughput, whose clock synchronises the device)."""

    class BenchTrial(pytorch.PyTorchTrial):
        def __init__(self, context: pytorch.PyTorchTrialContext, hparams: Any = None) -> None:
            self.context = context
            self.model = context.wrap_model(model_fn())
            self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), lr=1e-3))
            self.loss_fn = nn.CrossEntropyLoss()

        def build_training_data_loader(self) -> pytorch.DataLoader:
            bs = self.context.get_per_slot_batch_size()
            return pytorch.DataLoader(data, batch_size=bs, shuffle=True, drop_last=True)

        def build_validation_data_loader(self) -> pytorch.DataLoader:
            return pytorch.DataLoader(torch.utils.data.Subset(data, range(256)), batch_size=256)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            clock.tick(batch_idx)
            x, y = batch
            loss = self.loss_fn(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch: Any) -> dict[str, Any]:
            x, y = batch
            return {"val_loss": self.loss_fn(self.model(x), y)}

    return BenchTrial


def via_trial(
    model_fn: Callable[[], nn.Module], data: TensorDataset, batch_size: int, batches: int
) -> tuple[float, float]:
    clock = Clock(WARMUP, batches - 1)
    with tempfile.TemporaryDirectory() as tmp:
        pytorch.run_trial(
            trial_class(model_fn, data, clock),
            hparams={"global_batch_size": batch_size},
            config={"searcher": {"metric": "val_loss", "max_length": {"batches": batches}}},
            checkpoint_dir=tmp,
        )
    return clock.rate(batch_size)


def by_hand(
    model_fn: Callable[[], nn.Module], data: TensorDataset, batch_size: int, batches: int
) -> tuple[float, float]:
    torch.manual_seed(0)
    model = model_fn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, drop_last=True)
    clock = Clock(WARMUP, batches - 1)
    model.train()
    n, losses, logged = 0, [], []
    while n < batches:
        for x, y in loader:
            if n == batches:
                break
            clock.tick(n)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())  # what the harness keeps per batch
            n += 1
            if n % REPORT_EVERY == 0:  # what it does per report: one sync for the average
                logged.append(torch.stack(losses).double().mean().item())
                losses = []
    return clock.rate(batch_size)


def measure(
    name: str,
    model_fn: Callable[[], nn.Module],
    data: TensorDataset,
    batch_size: int,
    batches: int,
    rounds: int,
) -> dict[str, Any]:
    trial, hand = [], []
    by_hand(model_fn, data, batch_size, WARMUP + 10)  # warm both paths (allocator, imports)
    via_trial(model_fn, data, batch_size, WARMUP + 10)
    for _ in range(rounds):
        hand.append(by_hand(model_fn, data, batch_size, batches))
        trial.append(via_trial(model_fn, data, batch_size, batches))
    t = statistics.median(c for c, _ in trial)
    h = statistics.median(c for c, _ in hand)
    tw = statistics.median(w for _, w in trial)
    hw = statistics.median(w for _, w in hand)
    print(
        f"{name}: PyTorchTrial {t:,.0f} samples/CPU-s, hand-written {h:,.0f} ({t / h:.1%}); "
        f"wall {tw:,.0f} / {hw:,.0f} samples/s ({tw / hw:.1%})"
    )
    return {
        "trial": trial,
        "hand": hand,
        "trial_median": t,
        "hand_median": h,
        "ratio": t / h,
        "trial_wall_median": tw,
        "hand_wall_median": hw,
        "wall_ratio": tw / hw,
    }


def run(rounds: int = 15, docs: bool = True) -> bool:
    torch.set_num_threads(1)
    results = {
        "digits MLP (batch 32)": measure("digits", digits_model, digits_data(), 32, 1500, rounds),
        "synthetic CNN (batch 64)": measure("cnn", cnn, cnn_data(), 64, CNN_BATCHES, rounds),
    }
    rows: list[Row] = []
    for name, r in results.items():
        rows += [
            (f"{name}: hand-written loop, wall", f"{r['hand_wall_median']:,.0f} samples/s", ""),
            (f"{name}: PyTorchTrial, wall", f"{r['trial_wall_median']:,.0f} samples/s", ""),
            (
                f"{name}: PyTorchTrial / hand-written, wall",
                f"{r['wall_ratio']:.1%}",
                f">= {TARGET:.0%}",
            ),
            (f"{name}: hand-written loop, CPU", f"{r['hand_median']:,.0f} samples/CPU-s", ""),
            (f"{name}: PyTorchTrial, CPU", f"{r['trial_median']:,.0f} samples/CPU-s", ""),
            (f"{name}: PyTorchTrial / hand-written, CPU", f"{r['ratio']:.1%}", f">= {TARGET:.0%}"),
        ]
    summary = (
        f"One process, one torch thread; medians of {rounds} interleaved rounds per side, "
        f"measured from batch {WARMUP} to the last (no start-up, no final validation; every "
        f"window holds metric reports, one per {REPORT_EVERY} batches on both sides, with the "
        "same per-batch work). Wall time and CPU time of the process are both compared."
    )
    publish(NAME, summary, rows, results, docs)
    return all(r["ratio"] >= TARGET and r["wall_ratio"] >= TARGET for r in results.values())


if __name__ == "__main__":
    sys.exit(0 if run(docs="--no-docs" not in sys.argv) else 1)
