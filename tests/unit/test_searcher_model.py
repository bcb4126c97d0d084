"""Model-based proposals (TPE or GP on rung results) and adaptive ASHA's `sampler` option."""

from __future__ import annotations

import json
import random
import statistics
import sys
from collections.abc import Callable
from typing import Any

import pytest

from detlab.expconf import ConfigError, ExperimentConfig, parse_experiment_config
from master.searcher import AdaptiveASHASearch, Create, ValidateAfter, make_searcher
from master.searcher.hparams import sample
from master.searcher.model import (
    MODELS,
    TRUST_MARGIN,
    TRUST_TOP,
    Observation,
    _best_and_latest,
    _decode,
    _encode,
    _flat_space,
    min_points,
    propose,
    unavailable,
)

SPACE: dict[str, Any] = {
    "lr": {"type": "log", "minval": -4.0, "maxval": -1.0, "base": 10.0},
    "width": {"type": "int", "minval": 8, "maxval": 128},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "opt": {"type": "categorical", "vals": ["adam", "sgd", {"name": "lamb"}]},
    "arch": {
        "type": "object",
        "vals": {
            "depth": {"type": "int", "minval": 1, "maxval": 4},
            "kind": {"type": "const", "val": "mlp"},
        },
    },
    "epochs": {"type": "const", "val": 3},
}


def observations(f, n: int, seed: int = 0, length: int = 10) -> list[Observation]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        hp = sample(SPACE, rng)
        out.append(Observation(hp, length, f(hp)))
    return out


def quadratic(hp: dict[str, Any]) -> float:
    """Best at dropout 0.4 and width 100."""
    return (hp["dropout"] - 0.4) ** 2 + ((hp["width"] - 100) / 120) ** 2


# -- the space ----------------------------------------------------------------------------------


def test_every_type_round_trips_through_optuna_params() -> None:
    flat = _flat_space(SPACE)
    assert list(flat) == ["arch.depth", "dropout", "lr", "opt", "width"]  # const left out
    rng = random.Random(3)
    for _ in range(50):
        hp = sample(SPACE, rng)
        params = _encode(flat, hp)
        assert params is not None
        back = _decode(SPACE, flat, params)
        assert back.keys() == hp.keys()
        assert back["arch"] == hp["arch"] and back["epochs"] == 3 and back["opt"] == hp["opt"]
        assert back["width"] == hp["width"] and back["dropout"] == pytest.approx(hp["dropout"])
        assert back["lr"] == pytest.approx(hp["lr"], rel=1e-9)


@pytest.mark.parametrize(
    "change",
    [
        {"width": 500},  # outside the range
        {"opt": "rmsprop"},  # not one of the values
        {"lr": -1.0},  # no logarithm
        {"dropout": "high"},  # not a number
        {"arch": {"kind": "mlp"}},  # depth missing
    ],
)
def test_hparams_outside_the_space_are_not_modelled(change: dict[str, Any]) -> None:
    hp = {**sample(SPACE, random.Random(1)), **change}
    assert _encode(_flat_space(SPACE), hp) is None


def test_min_points_is_dimensions_plus_two() -> None:
    assert min_points(SPACE) == 7
    assert min_points({"c": {"type": "const", "val": 1}}) == 2


# -- proposals ---------------------------------------------------------------------------------


def test_no_proposal_until_a_rung_has_enough_results() -> None:
    obs = observations(quadratic, min_points(SPACE) - 1)
    assert propose(SPACE, obs, seed=1) is None
    spread = [Observation(o.hparams, 10 + i, o.metric) for i, o in enumerate(obs * 2)]
    assert propose(SPACE, spread, seed=1) is None  # enough in total, not in one rung
    assert propose({"c": {"type": "const", "val": 1}}, obs * 3, seed=1) is None


@pytest.mark.parametrize("model", MODELS)
def test_proposals_are_valid_and_deterministic_per_seed(model: str) -> None:
    obs = observations(quadratic, 30)
    first = [propose(SPACE, obs, seed=s, model=model) for s in range(5)]
    again = [propose(SPACE, obs, seed=s, model=model) for s in range(5)]
    assert first == again
    if model == "tpe":  # TPE samples; the GP maximises, so only pending trials spread it
        assert len({json.dumps(p, sort_keys=True) for p in first}) == 5
    for hp in first:
        assert hp is not None
        assert 8 <= hp["width"] <= 128 and isinstance(hp["width"], int)
        assert 0.0 <= hp["dropout"] <= 0.5
        assert 1e-4 <= hp["lr"] <= 1e-1
        assert hp["opt"] in SPACE["opt"]["vals"]
        assert hp["arch"]["kind"] == "mlp" and 1 <= hp["arch"]["depth"] <= 4
        assert hp["epochs"] == 3


@pytest.mark.parametrize("model", MODELS)
def test_proposals_concentrate_where_results_were_good(model: str) -> None:
    obs = observations(quadratic, 60)
    proposed = [
        propose(SPACE, obs, seed=s, model=model) for s in range(40 if model == "tpe" else 8)
    ]
    model = statistics.median(quadratic(hp) for hp in proposed if hp is not None)
    uniform = statistics.median(quadratic(sample(SPACE, random.Random(s))) for s in range(40))
    assert model < uniform / 3


@pytest.mark.parametrize("model", MODELS)
def test_larger_is_better_flips_the_model(model: str) -> None:
    obs = [Observation(o.hparams, o.length, -o.metric) for o in observations(quadratic, 60)]
    proposed = [
        propose(SPACE, obs, seed=s, smaller_is_better=False, model=model)
        for s in range(40 if model == "tpe" else 8)
    ]
    assert statistics.median(quadratic(hp) for hp in proposed if hp is not None) < 0.03


@pytest.mark.parametrize("model", MODELS)
def test_the_longest_rung_with_enough_results_is_modelled(model: str) -> None:
    # Short rung: good at dropout 0; long rung (enough results): good at dropout 0.4.
    short = [
        Observation(o.hparams, 1, o.hparams["dropout"]) for o in observations(quadratic, 60, 1)
    ]
    long = observations(quadratic, 20, 2, length=9)
    proposed = [
        propose(SPACE, short + long, seed=s, model=model)
        for s in range(30 if model == "tpe" else 6)
    ]
    assert statistics.median(hp["dropout"] for hp in proposed if hp is not None) > 0.25


def test_gp_spreads_proposals_over_pending_trials() -> None:
    obs = observations(quadratic, 30)
    pending: list[dict[str, Any]] = []
    for s in range(5):
        hp = propose(SPACE, obs, seed=s, model="gp", pending=pending)
        assert hp is not None
        pending.append(hp)
    assert len({json.dumps(p, sort_keys=True) for p in pending}) == 5  # no duplicates
    assert statistics.median(quadratic(hp) for hp in pending) < 0.02  # still near the optimum


def test_gp_proposes_only_inside_the_trust_region_of_the_best_quarter() -> None:
    # The best quarter lies in x, y in [0.4, 0.5]; the rest of the rung is spread everywhere and
    # worse. The GP knows nothing between the good cluster and the box's far corners, which
    # unbounded expected improvement would explore; the trust region keeps it to the cluster's
    # bounding box widened by TRUST_MARGIN of each range: [0.3, 0.6] here (x: width 0..100).
    space = {
        "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
        "y": {"type": "int", "minval": 0, "maxval": 100},
        "kind": {"type": "categorical", "vals": ["a", "b"]},
    }
    rng = random.Random(3)
    good = [
        Observation({"x": rng.uniform(0.4, 0.5), "y": rng.randint(40, 50), "kind": "a"}, 9, 0.1)
        for _ in range(5)
    ]
    rest = [
        Observation({"x": rng.random(), "y": rng.randint(0, 100), "kind": "b"}, 9, 1.0 + i / 10)
        for i in range(15)
    ]
    assert TRUST_TOP == 1 / 4 and TRUST_MARGIN == 0.1
    lo_x = min(o.hparams["x"] for o in good) - 0.1
    hi_x = max(o.hparams["x"] for o in good) + 0.1
    lo_y = min(o.hparams["y"] for o in good) - 10
    hi_y = max(o.hparams["y"] for o in good) + 10
    pending: list[dict[str, Any]] = []
    for s in range(4):
        hp = propose(space, good + rest, seed=s, model="gp", pending=pending)
        assert hp is not None
        assert lo_x <= hp["x"] <= hi_x and lo_y <= hp["y"] <= hi_y, hp
        assert hp["kind"] in ("a", "b")  # categorical dimensions are not narrowed
        pending.append(hp)
    # Larger is better: the region follows the best quarter, now the largest results.
    top = sorted(rest, key=lambda o: -o.metric)[:5]
    hp = propose(space, good + rest, seed=0, model="gp", smaller_is_better=False)
    assert hp is not None
    xs = [o.hparams["x"] for o in top]
    assert min(xs) - 0.1 <= hp["x"] <= max(xs) + 0.1


@pytest.fixture
def acqf_seen(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The acquisition functions the GP sampler optimises, spied on Optuna's own optimiser (so a
    test proves what the installed Optuna really receives)."""
    import optuna

    seen: list[Any] = []
    stock = optuna.samplers.GPSampler._optimize_acqf

    def spy(self: Any, acqf: Any, best_params: Any) -> Any:
        seen.append(acqf)
        return stock(self, acqf, best_params)

    monkeypatch.setattr(optuna.samplers.GPSampler, "_optimize_acqf", spy)
    return seen


def test_gp_measures_improvement_against_the_best_posterior_mean(acqf_seen: list[Any]) -> None:
    # Noisy results around a smooth bowl, plus one lucky draw far below the bowl's floor. Stock
    # EI would measure improvement over that draw; plug-in EI uses the best posterior mean at
    # the observed points, which the GP (it models noise) keeps above the lucky draw. Spying on
    # Optuna's own optimiser proves the override is in effect with the installed Optuna.
    import torch
    from optuna._gp import acqf as acqf_module

    rng = random.Random(5)
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    rung = [
        Observation({"x": x}, 9, (x - 0.5) ** 2 + rng.gauss(0, 0.05))
        for x in (i / 29 for i in range(30))
    ]
    rung.append(Observation({"x": 0.52}, 9, -0.4))  # the lucky draw
    assert propose(space, rung, seed=1, model="gp") is not None
    (acqf,) = acqf_seen
    assert type(acqf) is acqf_module.LogEI
    gpr = acqf._gpr
    with torch.no_grad():
        mean, _ = gpr.posterior(gpr._X_train)
    best_observed = float(gpr._y_train.max())  # standardised, larger is better
    assert acqf._threshold == pytest.approx(float(mean.max()))
    assert acqf._threshold < best_observed - 0.5


def test_gp_feeds_at_most_the_best_and_the_latest_results() -> None:
    rung = [Observation({"i": i}, 10, float((i * 37) % 101)) for i in range(300)]
    kept = _best_and_latest(rung, 128, smaller_is_better=True)
    assert len(kept) == 128
    assert [o.hparams["i"] for o in kept] == sorted(o.hparams["i"] for o in kept)  # arrival order
    best = sorted(rung, key=lambda o: o.metric)[:64]
    assert all(o in kept for o in best)
    assert all(o in kept for o in rung[-64:])
    worst = _best_and_latest(rung, 128, smaller_is_better=False)
    assert all(o in worst for o in sorted(rung, key=lambda o: -o.metric)[:64])


def test_gp_needs_torch_and_scipy_on_the_master(monkeypatch: pytest.MonkeyPatch) -> None:
    assert unavailable("gp") is None and unavailable("tpe") is None  # both installed here
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    why = unavailable("gp")
    assert why is not None and "sampler gp needs PyTorch and SciPy" in why
    assert unavailable("tpe") is None


def test_non_finite_results_are_ignored() -> None:
    obs = observations(quadratic, min_points(SPACE) - 1)
    obs.append(Observation(obs[0].hparams, 10, float("inf")))
    assert propose(SPACE, obs, seed=1) is None


# -- adaptive ASHA with sampler tpe / random -----------------------------------------------------


def asha_config(sampler: str | None = None) -> ExperimentConfig:
    searcher: dict[str, Any] = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_length": {"batches": 27},
        "max_trials": 60,
        "max_concurrent_trials": 4,
        "divisor": 3,
        "max_rungs": 3,
        "mode": "aggressive",
    }
    if sampler is not None:
        searcher["sampler"] = sampler
    return parse_experiment_config(
        {"entrypoint": "python3 train.py", "hyperparameters": SPACE, "searcher": searcher}
    )


def drive(
    searcher: AdaptiveASHASearch,
    results: int,
    every: int = 0,
    swap: Callable[[dict], dict] = lambda snap: snap,
) -> list[Create]:
    """Answer every ValidateAfter with quadratic(hparams) until `results` results came in.

    With `every`, the searcher is replaced every that many results by a fresh one restored
    from its snapshot (passed through `swap`), as after a master restart.
    """
    created: list[Create] = []
    pending: list[ValidateAfter] = []
    hps: dict[str, dict] = {}

    def take(ops: list) -> None:
        for op in ops:
            if isinstance(op, Create):
                created.append(op)
                hps[op.request_id] = op.hparams
            elif isinstance(op, ValidateAfter):
                pending.append(op)

    take(searcher.initial_operations())
    for i in range(1, results + 1):
        if not pending:
            break
        op = pending.pop(0)
        metric = quadratic(hps[op.request_id])
        take(searcher.on_validation_completed(op.request_id, metric, op.length))
        if every and i % every == 0:
            snap = swap(json.loads(json.dumps(searcher.snapshot(), allow_nan=False)))
            fresh = make_searcher(searcher.config, 999)
            fresh.restore(snap)
            assert isinstance(fresh, AdaptiveASHASearch)
            searcher = fresh
    return created


def test_random_is_the_default_and_sampler_is_validated() -> None:
    assert asha_config().searcher.sampler == "random"
    with pytest.raises(ConfigError, match="searcher.sampler: expected one of random, tpe, gp"):
        asha_config("bayes")


@pytest.mark.parametrize("model", MODELS)
def test_asha_model_proposes_better_trials_than_random(model: str) -> None:
    def quality(sampler: str) -> float:
        """Median objective of the trials created once rung 0 has results, over 3 seeds."""
        values = []
        for seed in (1, 2, 3):
            created = drive(make_searcher(asha_config(sampler), seed), results=90)
            values += [quadratic(c.hparams) for c in created[10:40]]
        return statistics.median(values)

    assert quality(model) < 0.6 * quality("random")


def test_asha_random_sampler_keeps_no_model_inputs() -> None:
    s = make_searcher(asha_config("random"), 5)
    assert isinstance(s, AdaptiveASHASearch)
    drive(s, results=20)
    assert s.snapshot()["state"]["hparams"] == {}


@pytest.mark.parametrize("model", MODELS)
def test_asha_model_snapshot_restore_continues_exactly(model: str) -> None:
    results = 80 if model == "tpe" else 40
    plain = drive(make_searcher(asha_config(model), 7), results=results)
    restored = drive(make_searcher(asha_config(model), 7), results=results, every=7)
    assert [(c.request_id, c.hparams, c.seed) for c in plain] == [
        (c.request_id, c.hparams, c.seed) for c in restored
    ]


def test_asha_tpe_restores_a_snapshot_without_hparams() -> None:
    def old_snapshot(snap: dict) -> dict:
        del snap["state"]["hparams"]  # written before model-based proposals existed
        return snap

    plain = drive(make_searcher(asha_config("tpe"), 7), results=80)
    old = drive(make_searcher(asha_config("tpe"), 7), results=80, every=10, swap=old_snapshot)
    # The same first trials, then the search goes on (learning from new trials only).
    assert [c.request_id for c in old[:10]] == [c.request_id for c in plain[:10]]
    assert len(old) >= 50 and len(plain) >= 50


def test_gp_believes_running_trials_score_what_it_predicts(acqf_seen: list[Any]) -> None:
    # Kriging believer: a trial still training enters the GP at the GP's own prediction for it.
    # Its mean stays where the results put it (a constant lie at the rung mean would drag the
    # region being exploited towards average), and only the uncertainty at the running point
    # collapses, so the next proposal moves off it.
    import torch

    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    rng = random.Random(2)
    rung = [
        Observation({"x": x}, 9, (x - 0.5) ** 2 + rng.gauss(0, 0.01))
        for x in (i / 19 for i in range(20))
    ]
    alone = propose(space, rung, seed=4, model="gp")
    assert alone is not None
    running = [{"x": alone["x"]}]
    spread = propose(space, rung, seed=4, model="gp", pending=running)
    assert spread is not None and spread["x"] != pytest.approx(alone["x"], abs=1e-6)
    without, with_running = acqf_seen
    assert with_running._gpr._X_all.shape[0] == without._gpr._X_train.shape[0] + 1
    with torch.no_grad():
        grid = torch.linspace(0, 1, 41, dtype=torch.float64).unsqueeze(-1)
        mean_without, var_without = without._gpr.posterior(grid)
        mean_with, var_with = with_running._gpr.posterior(grid)
        x_run = with_running._gpr._X_all[-1:]
        _, var_run_without = without._gpr.posterior(x_run)
        _, var_run_with = with_running._gpr.posterior(x_run)
    assert torch.allclose(mean_with, mean_without, atol=1e-6)  # the belief moves no mean
    assert bool((var_with <= var_without + 1e-12).all())
    assert float(var_run_with) < 0.5 * float(var_run_without)
    assert with_running._threshold == pytest.approx(without._threshold)


def test_a_changed_optuna_falls_back_loudly_once(caplog: pytest.LogCaptureFixture) -> None:
    """If Optuna's GP internals move, searches go on with stock EI and the master says so."""
    import types

    import torch

    from master.searcher import model

    class LogEI:  # an acquisition without the attributes plug-in EI reads
        pass

    fake_module = types.SimpleNamespace(LogEI=LogEI, __name__="optuna._gp.acqf")
    acqf = LogEI()
    model._FELL_BACK.clear()
    try:
        with caplog.at_level("ERROR", logger="detlab.searcher"):
            assert model._plug_in(acqf, fake_module, torch) is acqf
            assert model._plug_in(acqf, fake_module, torch) is acqf
        errors = [r for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1
        assert "falling back to Optuna's stock expected improvement" in errors[0].getMessage()
    finally:
        model._FELL_BACK.clear()
