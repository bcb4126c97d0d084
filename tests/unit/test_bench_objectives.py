"""bench/objectives: the multi-fidelity Hartmann functions and the resumable digits MLP."""

from __future__ import annotations

import random
import statistics

import pytest

from bench.objectives.hartmann import (
    ARGMIN,
    OPTIMUM,
    PRESETS,
    MFHartmann,
    fidelity_scale,
    mf_hartmann,
)


@pytest.mark.parametrize("dims", [3, 6])
def test_optimum_at_the_argmin_at_max_fidelity(dims: int) -> None:
    assert mf_hartmann(ARGMIN[dims], 100) == pytest.approx(OPTIMUM[dims], abs=1e-5)
    for preset in PRESETS:  # bias and noise vanish at z_max whatever the preset
        obj = MFHartmann(dims, preset, seed=7)
        assert obj.evaluate(ARGMIN[dims], 100) == pytest.approx(OPTIMUM[dims], abs=1e-5)
        assert obj.trial({f"X_{i}": v for i, v in enumerate(ARGMIN[dims])}, 0).train_to(
            100
        ) == pytest.approx(OPTIMUM[dims], abs=1e-5)


@pytest.mark.parametrize("preset", ["good", "terrible"])
def test_hartmann_expected_value_is_the_noise_free_full_fidelity_value(preset: str) -> None:
    obj = MFHartmann(3, preset, seed=11)
    argmin = {f"X_{i}": v for i, v in enumerate(ARGMIN[3])}
    assert obj.expected_value(argmin) == pytest.approx(OPTIMUM[3], abs=1e-5)
    x = {"X_0": 0.3, "X_1": 0.7, "X_2": 0.2}
    # At a low fidelity the noisy, biased value differs; at z_max it is the expected value.
    assert obj.trial(x, 0).train_to(10) != pytest.approx(obj.expected_value(x))
    assert obj.trial(x, 0).train_to(100) == pytest.approx(obj.expected_value(x))


@pytest.mark.parametrize("dims", [3, 6])
def test_the_argmin_is_a_minimum(dims: int) -> None:
    rng = random.Random(0)
    for _ in range(200):
        x = tuple(min(1.0, max(0.0, v + rng.gauss(0, 0.05))) for v in ARGMIN[dims])
        assert mf_hartmann(x, 100) >= OPTIMUM[dims] - 1e-5
        assert mf_hartmann(tuple(rng.random() for _ in range(dims)), 100) >= OPTIMUM[dims] - 1e-5


def test_fidelity_scale() -> None:
    assert fidelity_scale(1) == 0 and fidelity_scale(100) == pytest.approx(1.0)
    assert fidelity_scale(10) == pytest.approx(0.5)


@pytest.mark.parametrize("dims", [3, 6])
def test_bias_and_noise_shrink_with_fidelity(dims: int) -> None:
    rng = random.Random(dims)
    points = [tuple(rng.random() for _ in range(dims)) for _ in range(100)]
    bias, noise = PRESETS["moderate"]
    prev_bias = prev_noise = None
    for z in (1, 3, 10, 30, 60, 100):
        # bias alone: the gap to the true value, never negative, shrinks to zero
        gaps = [mf_hartmann(x, z, bias=bias) - mf_hartmann(x, 100) for x in points]
        assert min(gaps) >= -1e-12
        # noise alone: the spread around the noiseless value shrinks to zero
        spread = statistics.fmean(
            abs(mf_hartmann(x, z, noise=noise, seed=1) - mf_hartmann(x, z)) for x in points
        )
        mean_gap = statistics.fmean(gaps)
        if prev_bias is not None:
            assert mean_gap < prev_bias and spread < prev_noise
        prev_bias, prev_noise = mean_gap, spread
    assert prev_bias == pytest.approx(0.0, abs=1e-12) and prev_noise == pytest.approx(0.0)


def test_noise_is_deterministic_per_seed() -> None:
    x = (0.3, 0.4, 0.5)
    a = MFHartmann(3, "bad", seed=1)
    assert a.evaluate(x, 10) == MFHartmann(3, "bad", seed=1).evaluate(x, 10)
    assert a.evaluate(x, 10) != MFHartmann(3, "bad", seed=2).evaluate(x, 10)


def test_low_fidelity_is_clamped_to_z3_and_lengths_never_go_back() -> None:
    obj = MFHartmann(3, "good", seed=0)
    x = (0.2, 0.5, 0.8)
    assert obj.evaluate(x, 1) == obj.evaluate(x, 3)
    t = obj.trial({"X_0": 0.2, "X_1": 0.5, "X_2": 0.8}, 0)
    assert t.train_to(50) == obj.evaluate(x, 50)
    assert t.train_to(100) == obj.true_value(x)


def test_unknown_dims_and_presets_are_rejected() -> None:
    with pytest.raises(ValueError):
        MFHartmann(4)
    with pytest.raises(ValueError):
        MFHartmann(3, "awful")


def test_digits_trial_is_resumable_deterministic_and_memoised() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from bench.objectives.digits import DigitsMLP

    hp = {"lr": 0.1, "hidden": 16, "dropout": 0.1}
    obj = DigitsMLP(max_length=40)
    resumed = obj.trial(hp, seed=3)
    first, last = resumed.train_to(10), resumed.train_to(40)
    assert obj.computed_batches == 40  # the resume paid only the 30 added batches
    assert last < first < 2.5  # training helps; the loss starts near ln(10)

    fresh = DigitsMLP(max_length=40)  # a separate memo: recomputed in one go
    assert fresh.trial(hp, seed=3).train_to(40) == pytest.approx(last, rel=1e-5)
    assert fresh.trial(hp, seed=3).train_to(40) == pytest.approx(last, rel=1e-5)
    assert fresh.computed_batches == 40  # the second was memoised
    assert fresh.trial(hp, seed=4).train_to(40) != pytest.approx(last, rel=1e-5)


def test_digits_expected_value_averages_fresh_trial_seeds_apart_from_the_search() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from bench.objectives.digits import FRESH_SEED_BASE, DigitsMLP

    hp = {"lr": 0.1, "hidden": 16, "dropout": 0.1}
    obj = DigitsMLP(max_length=30, expected_seeds=3)
    searched = obj.trial(hp, seed=5).train_to(30)
    expected = obj.expected_value(hp)
    assert obj.computed_batches == 30  # the figure's training is not the search's cost
    reference = DigitsMLP(max_length=30)
    draws = [reference.trial(hp, FRESH_SEED_BASE + k).train_to(30) for k in range(3)]
    assert expected == pytest.approx(statistics.fmean(draws), rel=1e-5)
    assert searched not in draws  # fresh seeds, not the search's own draw
    assert obj.expected_value(dict(hp)) == expected  # memoised per configuration
    assert DigitsMLP(max_length=30, expected_seeds=3).expected_value(hp) == pytest.approx(
        expected, rel=1e-6
    )  # deterministic


def test_digits_divergence_reports_a_capped_metric() -> None:
    pytest.importorskip("torch")
    from bench.objectives.digits import DIVERGED, DigitsMLP

    obj = DigitsMLP(max_length=30)
    value = obj.trial({"lr": 1e6, "hidden": 8, "dropout": 0.0}, seed=0).train_to(30)
    assert value == DIVERGED


def test_digits_learning_rate_decays_to_zero_over_max_length() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from bench.objectives.digits import DigitsMLP

    obj = DigitsMLP(max_length=40)
    trial = obj.trial({"lr": 0.2, "hidden": 16, "dropout": 0.0}, seed=1)
    trial.train_to(10)  # a low rung: the schedule is the full run's, not the rung's
    (run,) = obj._runs[trial.key]
    assert run.scheduled_lr(0) == pytest.approx(0.2)
    assert run.scheduled_lr(20) == pytest.approx(0.1)
    assert run.scheduled_lr(40) == pytest.approx(0.0, abs=1e-12)
    assert run.opt.param_groups[0]["lr"] == pytest.approx(run.scheduled_lr(9))
    trial.train_to(40)
    assert run.opt.param_groups[0]["lr"] == pytest.approx(run.scheduled_lr(39))
    assert run.opt.param_groups[0]["lr"] < 0.001
