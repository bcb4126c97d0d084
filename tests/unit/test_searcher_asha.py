"""The `adaptive_asha` searcher: layout, promotions, idle trials, stopping forms, persistence."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from detlab.expconf import ExperimentConfig, parse_experiment_config
from master.searcher import (
    SEARCH_METHODS,
    AdaptiveASHASearch,
    Close,
    Create,
    ExitedReason,
    Shutdown,
    Stop,
    ValidateAfter,
    make_searcher,
    operation_from_json,
    operation_to_json,
)
from master.searcher.asha_layout import (
    asha_layout,
    bracket_trials,
    expected_rung_trials,
    mode_brackets,
    promote_quota,
    rung_lengths,
)


def config(**searcher: Any) -> ExperimentConfig:
    s: dict[str, Any] = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_length": {"batches": 8},
        "max_trials": 4,
        "max_concurrent_trials": 4,
        "divisor": 2,
        "max_rungs": 3,
        "mode": "aggressive",
    }
    s.update(searcher)
    return parse_experiment_config(
        {
            "entrypoint": "python3 train.py",
            "hyperparameters": {"lr": {"type": "double", "minval": 0.0, "maxval": 1.0}},
            "searcher": s,
        }
    )


def start(seed: int = 1, **searcher: Any) -> tuple[AdaptiveASHASearch, list[str], list]:
    s = make_searcher(config(**searcher), seed)
    assert isinstance(s, AdaptiveASHASearch)
    ops = s.initial_operations()
    return s, [op.request_id for op in ops if isinstance(op, Create)], ops


# -- layout -----------------------------------------------------------------------------


def test_registered() -> None:
    assert SEARCH_METHODS["adaptive_asha"] is AdaptiveASHASearch


def test_modes() -> None:
    assert mode_brackets("aggressive", 5) == [5]
    assert mode_brackets("standard", 5) == [3, 4, 5]
    assert mode_brackets("standard", 4) == [2, 3, 4]
    assert mode_brackets("standard", 1) == [1]
    assert mode_brackets("conservative", 3) == [1, 2, 3]


def test_bracket_trials_like_determined() -> None:
    assert bracket_trials(100, 4.0, [5, 4, 3]) == [71, 22, 7]
    assert bracket_trials(2, 4.0, [3, 2, 1]) == [1, 1, 0]
    for n in range(1, 40):
        assert sum(bracket_trials(n, 3.0, [4, 3, 2, 1])) == n


def test_rung_lengths_grow_and_end_at_max_length() -> None:
    assert rung_lengths(1000, 4.0, 4) == [15, 62, 250, 1000]
    assert rung_lengths(4, 4.0, 3) == [1, 4]  # 0.25 and 1 both become 1: merged
    assert rung_lengths(7, 2.0, 1) == [7]


def test_default_layout() -> None:
    cfg = config(
        max_length={"batches": 1000}, max_trials=100, divisor=4, max_rungs=5, mode="standard"
    )
    layout = asha_layout(cfg)
    # max_rungs is capped to 4 (4**3 <= 100 trials < 4**4); standard mode: [4, 3, 2].
    assert [b.num_rungs for b in layout] == [4, 3, 2]
    assert [b.trials for b in layout] == bracket_trials(100, 4.0, [4, 3, 2])
    assert layout[0].lengths == (15, 62, 250, 1000)
    assert layout[2].lengths == (250, 1000)


def test_bracket_rungs_override_mode() -> None:
    layout = asha_layout(config(bracket_rungs=[1, 3], max_trials=10, mode="standard"))
    assert [b.num_rungs for b in layout] == [3, 1]
    assert [b.lengths for b in layout] == [(2, 4, 8), (8,)]
    assert sum(b.trials for b in layout) == 10


def test_conservative_spreads_trials_over_all_brackets() -> None:
    s, rids, _ = start(mode="conservative", max_trials=12, max_concurrent_trials=0)
    assert [b.num_rungs for b in s.brackets] == [3, 2, 1]
    per_bracket = [sum(1 for r in rids if s.bracket_of(r) == b) for b in range(3)]
    assert per_bracket == [b.trials for b in s.brackets]


def test_promote_quota() -> None:
    assert [promote_quota(n, 4.0) for n in range(9)] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    assert promote_quota(7, 3.5) == 2
    assert expected_rung_trials(16, 3, 2.0, False) == [16, 8, 4]
    assert expected_rung_trials(5, 3, 2.0, False) == [5, 2, 1]


# -- the promotion form ---------------------------------------------------------------------


def test_initial_operations() -> None:
    s, rids, ops = start()
    assert len(rids) == 4 and len(ops) == 8
    for i, rid in enumerate(rids):
        assert isinstance(ops[2 * i], Create) and ops[2 * i].request_id == rid
        assert ops[2 * i + 1] == ValidateAfter(rid, 2)
    assert s.initial_operations() == []


def test_idle_trial_promoted_later_and_full_run() -> None:
    s, (t0, t1, t2, t3), _ = start()
    assert s.on_trial_created(t0) == []
    # t0 is first in rung 0: floor(1/2) = 0 promotions, so it goes idle (no op).
    assert s.on_validation_completed(t0, 0.1, 2) == []
    # t1 is worse; floor(2/2) = 1: the idle t0 is promoted now (it resumes from its checkpoint).
    assert s.on_validation_completed(t1, 0.5, 2) == [ValidateAfter(t0, 4)]
    assert s.on_validation_completed(t2, 0.3, 2) == []  # floor(3/2) = 1 already used
    # floor(4/2) = 2: t3 (best) is promoted; rung 0 can get no more results: close the rest.
    assert s.on_validation_completed(t3, 0.05, 2) == [ValidateAfter(t3, 4), Close(t1), Close(t2)]
    assert s.on_trial_closed(t1) == []
    assert s.on_validation_completed(t0, 0.2, 4) == []
    assert s.on_validation_completed(t3, 0.15, 4) == [ValidateAfter(t3, 8), Close(t0)]
    assert s.on_validation_completed(t3, 0.12, 8) == [Close(t3), Shutdown(failure=False)]
    assert s.progress({}) == 1.0
    assert s.on_validation_completed(t3, 0.12, 8) == []


def test_larger_is_better() -> None:
    s, (t0, t1, _t2, _t3), _ = start(smaller_is_better=False)
    assert s.on_validation_completed(t0, 0.1, 2) == []
    assert s.on_validation_completed(t1, 0.5, 2) == [ValidateAfter(t1, 4)]


def test_ties_rank_by_arrival() -> None:
    s, (t0, t1, _t2, _t3), _ = start()
    assert s.on_validation_completed(t0, 0.5, 2) == []
    assert s.on_validation_completed(t1, 0.5, 2) == [ValidateAfter(t0, 4)]


def test_new_trials_fill_free_slots() -> None:
    s, rids, ops = start(max_trials=4, max_concurrent_trials=1)
    assert len(rids) == 1 and ops[1] == ValidateAfter(rids[0], 2)
    ops = s.on_validation_completed(rids[0], 0.5, 2)  # idle: a new trial takes its slot
    (create,) = [op for op in ops if isinstance(op, Create)]
    assert ops == [create, ValidateAfter(create.request_id, 2)]
    # The new one is better: promoted at once, keeping its slot; nothing new is created.
    assert s.on_validation_completed(create.request_id, 0.1, 2) == [
        ValidateAfter(create.request_id, 4)
    ]


def test_validation_below_the_rung_is_ignored() -> None:
    s, (t0, *_), _ = start()
    assert s.on_validation_completed(t0, 0.1, 1) == []
    assert s.on_validation_completed("nope", 0.1, 2) == []
    assert s.on_validation_metrics(t0, {"loss": 0.1, "batches": 5}, 5) == []


def test_invalid_hp_is_replaced_and_its_results_removed() -> None:
    s, (t0, t1), _ = start(max_trials=2)
    assert [b.lengths for b in s.brackets] == [(4, 8)]
    assert s.on_validation_completed(t0, 0.1, 4) == []
    ops = s.on_trial_exited_early(t1, ExitedReason.INVALID_HP)
    (create,) = [op for op in ops if isinstance(op, Create)]
    t2 = create.request_id
    assert ops == [create, ValidateAfter(t2, 4)]
    assert s.invalid == 1
    assert s.on_validation_completed(t2, 0.2, 4) == [ValidateAfter(t0, 8), Close(t2)]


def test_invalid_hp_after_results_leaves_the_rung() -> None:
    s, (t0, t1), _ = start(max_trials=2)
    assert s.on_validation_completed(t0, 0.1, 4) == []
    assert s.on_validation_completed(t1, 0.2, 4) == [ValidateAfter(t0, 8), Close(t1)]
    ops = s.on_trial_exited_early(t0, ExitedReason.INVALID_HP)
    assert all(not any(e.request_id == t0 for e in rung) for rung in s.rungs[0])
    assert len([op for op in ops if isinstance(op, Create)]) == 1


def test_errored_trial_is_a_lost_result() -> None:
    s, (t0, t1), _ = start(max_trials=2)
    assert s.on_validation_completed(t0, 0.1, 4) == []
    # The lost result counts: floor(2/2) = 1, and t0 is the best.
    assert s.on_trial_exited_early(t1, ExitedReason.ERRORED) == [ValidateAfter(t0, 8)]
    assert s.on_trial_exited_early(t1, ExitedReason.ERRORED) == []
    assert s.on_validation_completed(t0, 0.1, 8) == [Close(t0), Shutdown(failure=False)]


def test_master_closing_a_training_trial_is_a_lost_result() -> None:
    s, (t0, t1), _ = start(max_trials=2)
    assert s.on_validation_completed(t0, 0.1, 4) == []
    assert s.on_trial_closed(t1) == [ValidateAfter(t0, 8)]


def test_every_trial_errored_is_a_failed_search() -> None:
    s, (t0, t1), _ = start(max_trials=2)
    assert s.on_trial_exited_early(t0, ExitedReason.ERRORED) == []
    assert s.on_trial_exited_early(t1, ExitedReason.USER_CANCELED) == [Shutdown(failure=True)]


def test_non_finite_metrics_in_snapshots_are_strings() -> None:
    s, (t0, t1, *_), _ = start()
    s.on_validation_completed(t0, math.inf, 2)
    s.on_validation_completed(t1, math.nan, 2)  # treated as the worst value
    snap = s.snapshot()
    text = json.dumps(snap, allow_nan=False)
    assert '"inf"' in text
    restored = make_searcher(config(), 5)
    restored.restore(json.loads(text))
    assert restored.snapshot() == snap


def test_snapshot_restore_continues_exactly() -> None:
    a, (t0, t1, t2, t3), _ = start(seed=3)
    a.on_validation_completed(t0, 0.1, 2)
    snap = json.loads(json.dumps(a.snapshot(), sort_keys=True, allow_nan=False))
    b = make_searcher(config(), 4)
    b.restore(snap)
    for rid, metric in ((t1, 0.5), (t2, 0.3), (t3, 0.05)):
        assert b.on_validation_completed(rid, metric, 2) == a.on_validation_completed(
            rid, metric, 2
        )
    assert b.snapshot() == a.snapshot()


def test_progress_grows_to_one() -> None:
    s, (t0, t1, t2, t3), _ = start()
    # expected: 4 trials to 2, 2 of them on to 4, 1 on to 8: 8 + 4 + 4 = 16
    assert s.expected_total == 16
    assert s.progress({}) == 0.0
    assert s.progress({t0: 2, t1: 2}) == 0.25
    assert s.progress({t0: 100}) == 0.5  # a trial counts at most max_length


# -- stop_once ---------------------------------------------------------------------------


def test_stop_once_closes_instead_of_idling() -> None:
    s, (t0, t1, t2, _t3), _ = start(stop_once=True)
    # The first result of a rung always continues: max(floor(1/2), 1) = 1.
    assert s.on_validation_completed(t0, 0.1, 2) == [ValidateAfter(t0, 4)]
    assert s.on_validation_completed(t1, 0.5, 2) == [Close(t1)]
    assert s.on_validation_completed(t2, 0.05, 2) == [ValidateAfter(t2, 4)]


# -- the time_metric form (Determined 0.38) ---------------------------------------------------


def time_start(**searcher: Any) -> tuple[AdaptiveASHASearch, list[str], list]:
    return start(max_length=None, time_metric="batches", max_time=8, **searcher)


def test_time_form_one_validate_after_max_time() -> None:
    s, rids, ops = time_start()
    assert [b.lengths for b in s.brackets] == [(2, 4, 8)]
    for rid in rids:
        assert ValidateAfter(rid, 8) in ops
    assert len(ops) == 8


def test_time_form_stops_trials_outside_the_top() -> None:
    s, (t0, t1, t2, t3), _ = time_start()
    assert s.on_validation_metrics(t0, {"batches": 1, "loss": 0.3}, 1) == []
    assert s.on_validation_metrics(t0, {"batches": 2, "loss": 0.3}, 2) == []  # first: continues
    assert s.on_validation_metrics(t1, {"batches": 3, "loss": 0.5}, 3) == [Stop(t1)]
    assert s.on_validation_metrics(t1, {"batches": 4, "loss": 0.1}, 4) == []  # already stopped
    assert s.on_trial_closed(t1) == []
    # One report can pass several rungs.
    assert s.on_validation_metrics(t2, {"batches": 5, "loss": 0.1}, 5) == []
    assert s.on_validation_metrics(t2, {"loss": 0.1}, 6) == []  # time from steps ("batches")
    assert s.on_validation_metrics(t2, {"batches": 6}, 6) == []  # no searcher metric
    assert s.on_validation_completed(t0, 0.2, 8) == [Close(t0)]
    assert s.on_trial_exited_early(t3, ExitedReason.ERRORED) == []
    assert s.on_validation_completed(t2, 0.1, 8) == [Close(t2), Shutdown(failure=False)]


def test_time_form_stop_creates_a_replacement_slot() -> None:
    s, rids, _ = time_start(max_concurrent_trials=1)
    (t0,) = rids
    assert s.on_validation_metrics(t0, {"batches": 2, "loss": 0.3}, 2) == []
    ops = s.on_validation_completed(t0, 0.3, 8)
    t1 = next(op.request_id for op in ops if isinstance(op, Create))
    assert ops[0] == Close(t0) and ValidateAfter(t1, 8) in ops
    ops = s.on_validation_metrics(t1, {"batches": 2, "loss": 0.9}, 2)
    assert ops[0] == Stop(t1)
    assert any(isinstance(op, Create) for op in ops)  # its slot is given to a new trial


def test_time_form_non_finite_metric_is_worst() -> None:
    s, (t0, t1, *_), _ = time_start()
    assert s.on_validation_metrics(t0, {"batches": 2, "loss": 0.3}, 2) == []
    assert s.on_validation_metrics(t1, {"batches": 2, "loss": "NaN"}, 2) == [Stop(t1)]
    json.dumps(s.snapshot(), allow_nan=False)


@pytest.mark.parametrize(
    "op", [Stop("r"), ValidateAfter("r", 3), Close("r"), Shutdown(failure=True)]
)
def test_stop_json_round_trip(op: Any) -> None:
    data = json.loads(json.dumps(operation_to_json(op)))
    assert operation_from_json(data) == op
    if isinstance(op, Stop):
        assert data == {"type": "stop", "request_id": "r"}
