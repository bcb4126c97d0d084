"""bench/_searchsim.py: the virtual-time search simulator, with toy objectives and searchers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from bench._searchsim import SearchResult, run_detlab, run_optuna, rung_lengths, suggest
from detlab.expconf import ExperimentConfig, parse_experiment_config
from master.searcher import (
    Close,
    ExitedReason,
    Operation,
    SearchMethod,
    Shutdown,
    ValidateAfter,
    make_searcher,
)


@dataclass
class ToyTrial:
    objective: Toy
    x: float
    length: int = 0

    def train_to(self, length: int) -> float:
        assert length >= self.length, "trials never train backwards"
        self.objective.trained += length - self.length
        self.length = length
        return self.x + 1.0 / length  # better with x smaller and with more training


@dataclass
class Toy:
    max_length: int = 16
    name: str = "toy"
    optimum: float | None = None
    space: dict[str, Any] = field(
        default_factory=lambda: {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    )
    trained: int = 0

    def trial(self, hparams: dict[str, Any], seed: int) -> ToyTrial:
        return ToyTrial(self, float(hparams["x"]))


def config(name: str = "single", **searcher: Any) -> ExperimentConfig:
    s = {"name": name, "metric": "loss", "max_length": {"batches": 16}, **searcher}
    return parse_experiment_config(
        {
            "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
            "searcher": s,
        }
    )


class TwoStage(SearchMethod):
    """Creates `n` trials to length 4, leaves them idle, then resumes the best one to 16."""

    name = "two_stage"

    def __init__(self, config: dict, seed: int, n: int = 4) -> None:
        super().__init__(config, seed)
        self.n = n
        self.results: dict[str, float] = {}
        self.events: list[tuple[str, str, int]] = []

    def initial_operations(self) -> list[Operation]:
        ops: list[Operation] = []
        for _ in range(self.n):
            c = self._create()
            ops += [c, ValidateAfter(c.request_id, 4)]
        return ops

    def on_validation_completed(
        self, request_id: str, metric: float, length: int
    ) -> list[Operation]:
        self.events.append(("validated", request_id, length))
        if length == 16:
            return [Close(request_id), Shutdown()]
        self.results[request_id] = metric
        if len(self.results) < self.n:
            return []  # idle: frees its worker
        best = min(self.results, key=self.results.__getitem__)
        closes: list[Operation] = [Close(r) for r in self.results if r != best]
        return [*closes, ValidateAfter(best, 16)]

    def on_trial_closed(self, request_id: str) -> list[Operation]:
        self.events.append(("closed", request_id, 0))
        return []

    def on_trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Operation]:
        return []

    def progress(self, lengths_completed: dict[str, float]) -> float:
        return 0.0

    def _state(self) -> dict[str, Any]:
        return {}

    def _load_state(self, state: dict[str, Any]) -> None:
        pass


def test_single_runs_one_trial_to_max_length() -> None:
    toy = Toy()
    res = run_detlab(make_searcher(config(), seed=1), toy, workers=2)
    assert res.shutdown and res.trials == 1 and res.validations == 1
    assert res.budget_used == 16 and res.makespan == 16 and toy.trained == 16
    assert res.points[0][:2] == (16, 16)
    assert res.best == pytest.approx(res.best_hparams["x"] + 1 / 16)


def test_idle_trials_free_workers_and_resume_paying_the_delta() -> None:
    toy = Toy()
    searcher = TwoStage(config(), seed=3, n=4)
    res = run_detlab(searcher, toy, workers=2)
    # 4 trials x 4 on 2 workers (time 8), then the best resumes 4 -> 16 (time 20).
    assert res.shutdown and res.trials == 4 and res.validations == 5
    assert res.budget_used == 4 * 4 + 12 and toy.trained == 28
    assert res.makespan == 8 + 12
    closed = [r for kind, r, _ in searcher.events if kind == "closed"]
    assert len(closed) == 4  # three closed while idle, the best after its last validation
    best_x = min(float(h) for h in [res.best_hparams["x"]])
    assert res.best == pytest.approx(best_x + 1 / 16)


def test_one_worker_is_sequential_and_budget_cap_stops_the_search() -> None:
    toy = Toy()
    res = run_detlab(TwoStage(config(), seed=3, n=4), toy, workers=1, budget=10)
    assert not res.shutdown
    assert res.budget_used == 10 and res.makespan == 10
    assert res.validations == 2  # validations at used budget 4 and 8; the third ends at 12
    assert [p[0] for p in res.points] == [4, 8]
    assert res.best_at(3) == math.inf and res.best_at(4) == res.points[0][2]


def test_more_workers_shorten_the_makespan_for_the_same_work() -> None:
    one = run_detlab(TwoStage(config(), seed=5, n=8), Toy(), workers=1)
    eight = run_detlab(TwoStage(config(), seed=5, n=8), Toy(), workers=8)
    assert one.budget_used == eight.budget_used == 8 * 4 + 12
    assert one.makespan == 44 and eight.makespan == 4 + 12
    assert one.best == eight.best


def test_search_result_queries() -> None:
    res = SearchResult()
    for used, metric in [(1, 5.0), (2, 3.0), (4, 4.0), (8, 1.0)]:
        res._record(used, used, metric, {"m": metric})
    assert [p[2] for p in res.points] == [5.0, 3.0, 3.0, 1.0]
    assert res.best_at(3) == 3.0 and res.best_at(100) == 1.0 and res.best_hparams == {"m": 1.0}
    assert res.budget_to_reach(3.0) == 2 and res.budget_to_reach(0.5) == math.inf
    # The recommendation at a budget is the hparams of the best validation completed within it.
    assert res.best_hparams_at(1.5) == {"m": 5.0} and res.best_hparams_at(7) == {"m": 3.0}
    assert res.best_hparams_at(8) == {"m": 1.0} and res.best_hparams_at(0.5) is None


def test_rung_lengths() -> None:
    assert rung_lengths(256, 4, 5) == [1, 4, 16, 64, 256]
    assert rung_lengths(100, 4, 3) == [6, 25, 100]


def test_optuna_side_shares_budget_and_reports_at_rungs() -> None:
    optuna = pytest.importorskip("optuna")
    toy = Toy()
    res = run_optuna(
        optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=4),
        toy,
        workers=2,
        budget=200,
        report_at=[1, 4, 16],
        seed=0,
    )
    assert res.budget_used == 200 and res.trials > 200 // 16  # pruning saves budget
    assert toy.trained <= 200 + 2 * 16  # at most the segments in flight beyond the budget
    assert res.best < 1.0


def test_optuna_without_pruning_trains_every_trial_fully() -> None:
    optuna = pytest.importorskip("optuna")
    toy = Toy()
    res = run_optuna(optuna.pruners.NopPruner(), toy, workers=1, budget=64, report_at=[4], seed=0)
    assert res.trials == 4 and res.validations == 8 and res.budget_used == 64
    assert res.makespan == 64


def test_suggest_maps_detlab_spaces() -> None:
    optuna = pytest.importorskip("optuna")
    space = {
        "lr": {"type": "log", "minval": -3, "maxval": -1, "base": 10.0},
        "n": {"type": "int", "minval": 1, "maxval": 3},
        "c": {"type": "categorical", "vals": ["a", "b"]},
        "k": {"type": "const", "val": 7},
        "g": {"type": "object", "vals": {"d": {"type": "double", "minval": 0, "maxval": 1}}},
    }
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    hp = suggest(study.ask(), space)
    assert 1e-3 <= hp["lr"] <= 1e-1 and hp["n"] in (1, 2, 3) and hp["c"] in ("a", "b")
    assert hp["k"] == 7 and 0 <= hp["g"]["d"] <= 1


@pytest.mark.parametrize("name", ["random", "adaptive_asha"])
@pytest.mark.parametrize("workers", [1, 3, 8])
def test_real_searchers_run_to_shutdown_paying_only_what_they_train(
    name: str, workers: int
) -> None:
    toy = Toy()
    cfg = config(name, max_trials=20, max_concurrent_trials=4, divisor=2, max_rungs=3)
    res = run_detlab(make_searcher(cfg, seed=11), toy, workers=workers)
    assert res.shutdown and res.trials == 20
    assert res.budget_used == toy.trained  # resumes paid only the added length
    if name == "random":
        assert res.budget_used == 20 * 16 and res.validations == 20
    else:
        assert res.budget_used < 20 * 16  # early stopping saved budget
    assert res.makespan >= res.budget_used / workers - 1e-9


def test_optuna_runs_are_deterministic_per_seed() -> None:
    optuna = pytest.importorskip("optuna")

    def once() -> list[tuple[float, float, float]]:
        pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=16, reduction_factor=4)
        return run_optuna(pruner, Toy(), workers=3, budget=300, report_at=[1, 4], seed=5).points

    assert once() == once()
