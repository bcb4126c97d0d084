"""device_throughput runs its three sides on any device (here the CPU) and pairs them by round."""

from __future__ import annotations

import torch

from bench import device_throughput as bench


def test_three_sides_train_the_same_work_and_are_paired_by_round() -> None:
    batches = bench.WARMUP + 2 * bench.REPORT_EVERY + 1
    r = bench.measure(
        bench.wide_mlp(32), bench.wide_data(), 64, batches, rounds=2, dev=torch.device("cpu")
    )
    assert len(r["hand"]) == len(r["trial"]) == len(r["trainer"]) == 2
    assert all(rate > 0 for side in ("hand", "trial", "trainer") for rate in r[side])
    for side in ("trial", "trainer"):
        lo, hi = r[f"{side}_ratio_range"]
        assert lo <= r[f"{side}_ratio"] <= hi


def test_without_cuda_it_says_so_and_runs_nothing(capsys) -> None:  # type: ignore[no-untyped-def]
    if torch.cuda.is_available():  # a GPU machine runs the real benchmark instead
        return
    assert bench.run(docs=False) is None
    assert "no CUDA device here" in capsys.readouterr().out


def test_windows_are_calibrated_to_whole_reports_of_about_the_asked_time(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cpu = torch.device("cpu")
    model, data = bench.wide_mlp(32), bench.wide_data()
    # the probe's answer fixed at 1,000 batches/s (64 samples each): the arithmetic alone
    monkeypatch.setattr(bench, "by_hand", lambda *a: 64_000.0)
    assert bench.calibrated_batches(model, data, 64, cpu, 0.5) == bench.WARMUP + 5 * 100 + 1
    assert bench.calibrated_batches(model, data, 64, cpu, 0.45) == bench.WARMUP + 5 * 100 + 1
    # never under two reports
    assert bench.calibrated_batches(model, data, 64, cpu, 0.001) == bench.WARMUP + 2 * 100 + 1
