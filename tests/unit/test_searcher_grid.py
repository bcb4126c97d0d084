"""The `grid` searcher: every grid point, max_concurrent_trials at a time, then Shutdown."""

from __future__ import annotations

import json
from typing import Any

from detlab.expconf import ExperimentConfig, parse_experiment_config
from master.searcher import (
    SEARCH_METHODS,
    Close,
    Create,
    ExitedReason,
    GridSearch,
    Shutdown,
    ValidateAfter,
    make_searcher,
)
from master.searcher.hparams import grid


def config(hparams: dict | None = None, **searcher: Any) -> ExperimentConfig:
    s: dict[str, Any] = {"name": "grid", "metric": "loss", "max_length": {"batches": 50}}
    s.update(searcher)
    if hparams is None:
        hparams = {
            "lr": {"type": "log", "minval": -3, "maxval": -1, "count": 3},
            "opt": {"type": "categorical", "vals": ["adam", "sgd"]},
            "bs": 32,
        }
    return parse_experiment_config(
        {"entrypoint": "python3 train.py", "hyperparameters": hparams, "searcher": s}
    )


def creates(ops: list) -> list[Create]:
    return [op for op in ops if isinstance(op, Create)]


def test_registered() -> None:
    assert SEARCH_METHODS["grid"] is GridSearch
    assert isinstance(make_searcher(config(), 1), GridSearch)


def test_every_point_in_order_with_concurrency() -> None:
    cfg = config(max_concurrent_trials=2)
    s = make_searcher(cfg, 3)
    ops = s.initial_operations()
    assert len(ops) == 4
    first, second = creates(ops)
    assert ops[1] == ValidateAfter(first.request_id, 50)
    assert ops[3] == ValidateAfter(second.request_id, 50)
    assert s.initial_operations() == []
    points = grid(cfg.hyperparameters)
    assert len(points) == 6
    seen = [first.hparams, second.hparams]
    running = [first.request_id, second.request_id]
    shutdown = []
    while running:
        rid = running.pop(0)
        ops = s.on_validation_completed(rid, 0.5, 50)
        assert ops[0] == Close(rid)
        for op in creates(ops):
            seen.append(op.hparams)
            running.append(op.request_id)
        assert len(running) <= 2
        shutdown += [op for op in ops if isinstance(op, Shutdown)]
        assert s.on_trial_closed(rid) == []
    assert seen == points
    assert shutdown == [Shutdown(failure=False)]
    assert s.progress({}) == 1.0


def test_zero_concurrency_means_all_at_once() -> None:
    s = make_searcher(config(max_concurrent_trials=0), 1)
    assert len(creates(s.initial_operations())) == 6


def test_max_trials_caps_the_grid() -> None:
    s = make_searcher(config(max_trials=4, max_concurrent_trials=0), 1)
    ops = s.initial_operations()
    assert len(creates(ops)) == 4


def test_seeds_differ_and_are_deterministic() -> None:
    a = creates(make_searcher(config(max_concurrent_trials=0), 5).initial_operations())
    b = creates(make_searcher(config(max_concurrent_trials=0), 5).initial_operations())
    assert a == b
    assert len({c.seed for c in a}) == len(a)
    assert len({c.request_id for c in a}) == len(a)


def test_invalid_and_errored_points_count_as_done() -> None:
    s = make_searcher(config(max_concurrent_trials=0), 1)
    trials = creates(s.initial_operations())
    assert s.on_trial_exited_early(trials[0].request_id, ExitedReason.INVALID_HP) == []
    assert s.on_trial_exited_early(trials[1].request_id, ExitedReason.ERRORED) == []
    assert s.on_trial_exited_early(trials[1].request_id, ExitedReason.ERRORED) == []  # again
    for t in trials[2:-1]:
        assert s.on_validation_completed(t.request_id, 1.0, 50) == [Close(t.request_id)]
    last = trials[-1].request_id
    assert s.on_validation_completed(last, 1.0, 50) == [Close(last), Shutdown(failure=False)]


def test_every_trial_failed_is_a_failed_search() -> None:
    s = make_searcher(config(hparams={"a": 1}), 1)
    (trial,) = creates(s.initial_operations())
    assert s.on_trial_exited_early(trial.request_id, ExitedReason.ERRORED) == [
        Shutdown(failure=True)
    ]


def test_master_closing_a_running_trial_moves_on() -> None:
    s = make_searcher(config(max_concurrent_trials=1), 1)
    (trial,) = creates(s.initial_operations())
    ops = s.on_trial_closed(trial.request_id)
    assert len(creates(ops)) == 1


def test_validation_below_max_length_ignored() -> None:
    s = make_searcher(config(), 1)
    trial = creates(s.initial_operations())[0]
    assert s.on_validation_completed(trial.request_id, 0.1, 10) == []
    assert s.on_validation_completed("unknown", 0.1, 50) == []


def test_progress() -> None:
    s = make_searcher(config(max_concurrent_trials=0), 1)
    trials = creates(s.initial_operations())
    assert s.progress({}) == 0.0
    assert s.progress({trials[0].request_id: 25}) == 25 / 300
    s.on_validation_completed(trials[0].request_id, 1.0, 50)
    assert s.progress({trials[1].request_id: 500}) == 100 / 300


def test_time_based_grid_uses_max_time() -> None:
    s = make_searcher(config(max_length=None, time_metric="batches", max_time=70), 1)
    assert s.initial_operations()[1].length == 70


def test_snapshot_restore() -> None:
    cfg = config(max_concurrent_trials=2)
    a = make_searcher(cfg, 9)
    ops = a.initial_operations()
    a.on_validation_completed(ops[0].request_id, 0.2, 50)
    snap = json.loads(json.dumps(a.snapshot(), allow_nan=False, sort_keys=True))
    b = make_searcher(cfg, 10)
    b.restore(snap)
    rid = ops[2].request_id
    assert b.on_validation_completed(rid, 0.3, 50) == a.on_validation_completed(rid, 0.3, 50)
    assert b.snapshot() == a.snapshot()
