"""The `random` searcher: max_trials sampled trials, replaced when their hparams are invalid."""

from __future__ import annotations

import json
from typing import Any

import pytest

from detlab.expconf import ExperimentConfig, parse_experiment_config
from master.searcher import (
    SEARCH_METHODS,
    Close,
    Create,
    ExitedReason,
    RandomSearch,
    Resume,
    Shutdown,
    ValidateAfter,
    make_searcher,
)


def config(**searcher: Any) -> ExperimentConfig:
    s: dict[str, Any] = {
        "name": "random",
        "metric": "acc",
        "smaller_is_better": False,
        "max_length": {"epochs": 3},
        "max_trials": 5,
        "max_concurrent_trials": 2,
    }
    s.update(searcher)
    return parse_experiment_config(
        {
            "entrypoint": "python3 train.py",
            "records_per_epoch": 100,
            "hyperparameters": {
                "lr": {"type": "log", "minval": -4, "maxval": -1},
                "layers": {"type": "int", "minval": 1, "maxval": 4},
                "drop": {"type": "double", "minval": 0.0, "maxval": 0.5},
            },
            "searcher": s,
        }
    )


def creates(ops: list) -> list[Create]:
    return [op for op in ops if isinstance(op, Create)]


def test_registered() -> None:
    assert SEARCH_METHODS["random"] is RandomSearch


def test_initial_operations_respect_concurrency() -> None:
    s = make_searcher(config(), 1)
    ops = s.initial_operations()
    assert len(ops) == 4
    for create in creates(ops):
        assert ValidateAfter(create.request_id, 3) in ops
        assert 1e-4 <= create.hparams["lr"] <= 1e-1
        assert 1 <= create.hparams["layers"] <= 4
        assert 0.0 <= create.hparams["drop"] <= 0.5
    assert s.initial_operations() == []


def test_zero_concurrency_creates_all() -> None:
    s = make_searcher(config(max_concurrent_trials=0), 1)
    assert len(creates(s.initial_operations())) == 5


def test_concurrency_above_max_trials() -> None:
    s = make_searcher(config(max_concurrent_trials=50), 1)
    assert len(creates(s.initial_operations())) == 5


def test_full_run_with_invalid_and_errored() -> None:
    s = make_searcher(config(), 4)
    running = [c.request_id for c in creates(s.initial_operations())]
    created = len(running)
    ended = 0
    step = 0
    shutdown = []
    while running:
        rid = running.pop(0)
        step += 1
        if step == 2:
            ops = s.on_trial_exited_early(rid, ExitedReason.INVALID_HP)
            assert len(creates(ops)) == 1  # replaced
        elif step == 3:
            ops = s.on_trial_exited_early(rid, ExitedReason.ERRORED)
            ended += 1
        else:
            ops = s.on_validation_completed(rid, 0.9, 3)
            assert ops[0] == Close(rid)
            ended += 1
        new = creates(ops)
        created += len(new)
        running += [c.request_id for c in new]
        assert len(running) <= 2
        shutdown += [op for op in ops if isinstance(op, Shutdown)]
    assert created == 6  # 5 + the replacement
    assert ended == 5
    assert shutdown == [Shutdown(failure=False)]


def test_same_seed_same_trials_other_seed_other_trials() -> None:
    a = make_searcher(config(), 7).initial_operations()
    assert a == make_searcher(config(), 7).initial_operations()
    assert creates(a) != creates(make_searcher(config(), 8).initial_operations())


@pytest.mark.parametrize("reason", [ExitedReason.ERRORED, ExitedReason.USER_CANCELED])
def test_all_failed_is_a_failed_search(reason: ExitedReason) -> None:
    s = make_searcher(config(max_trials=2, max_concurrent_trials=0), 1)
    a, b = creates(s.initial_operations())
    assert s.on_trial_exited_early(a.request_id, reason) == []
    assert s.on_trial_exited_early(b.request_id, reason) == [Shutdown(failure=True)]
    assert s.on_trial_exited_early(b.request_id, reason) == []


def test_stale_events_ignored() -> None:
    s = make_searcher(config(), 1)
    c = creates(s.initial_operations())[0]
    assert s.on_validation_completed("nope", 1.0, 3) == []
    assert s.on_trial_exited_early("nope", ExitedReason.ERRORED) == []
    assert s.on_trial_closed("nope") == []
    assert s.on_validation_metrics(c.request_id, {"acc": 1.0}, 10) == []
    s.on_validation_completed(c.request_id, 1.0, 3)
    assert s.on_validation_completed(c.request_id, 1.0, 3) == []
    assert s.on_trial_closed(c.request_id) == []


def test_progress() -> None:
    s = make_searcher(config(max_trials=2, max_concurrent_trials=0), 1)
    a, b = creates(s.initial_operations())
    assert s.progress({a.request_id: 1.5}) == 0.25
    s.on_validation_completed(a.request_id, 1.0, 3)
    assert s.progress({a.request_id: 3}) == 0.5
    s.on_validation_completed(b.request_id, 1.0, 3)
    assert s.progress({}) == 1.0


def test_snapshot_restore_mid_run() -> None:
    cfg = config()
    a = make_searcher(cfg, 2)
    ops = a.initial_operations()
    a.on_trial_exited_early(ops[0].request_id, ExitedReason.INVALID_HP)
    snap = a.snapshot()
    json.dumps(snap, allow_nan=False)
    b = make_searcher(cfg, 99)
    b.restore(json.loads(json.dumps(snap, sort_keys=True)))
    rid = ops[2].request_id
    assert b.on_validation_completed(rid, 0.5, 3) == a.on_validation_completed(rid, 0.5, 3)
    assert b.snapshot() == a.snapshot()


def test_continue_takes_up_unfinished_trials_and_creates_the_rest() -> None:
    s = make_searcher(config(max_trials=3, max_concurrent_trials=2), 1)
    a, b = (c.request_id for c in creates(s.initial_operations()))
    ops = s.on_validation_completed(a, 0.9, 3)  # a is done; the third trial is created
    (c,) = (op.request_id for op in creates(ops))
    s.on_trial_exited_early(b, ExitedReason.ERRORED)
    s.on_trial_closed(c)  # killed: the search ends with one result
    assert s.shut_down
    ops = s.on_continue_search([b, c])  # the master passes the trials that did not complete
    # The same trials, nothing new.
    assert ops == [Resume(b), ValidateAfter(b, 3), Resume(c), ValidateAfter(c, 3)]
    assert not s.shut_down and s.failed == 0
    s.on_validation_completed(b, 0.5, 3)
    assert s.on_validation_completed(c, 0.7, 3)[-1] == Shutdown(failure=False)
    # Done everywhere: continuing again asks for nothing but the shutdown.
    assert s.on_continue_search([]) == [Shutdown(failure=False)]


def test_continue_creates_trials_a_canceled_search_never_issued() -> None:
    s = make_searcher(config(max_trials=3, max_concurrent_trials=1), 1)
    (a,) = (c.request_id for c in creates(s.initial_operations()))
    # Killed: the searcher answered with a Create that made no trial (the search was ending).
    (lost,) = creates(s.on_trial_closed(a))
    s2 = make_searcher(config(max_trials=3, max_concurrent_trials=1), 1)
    s2.restore(json.loads(json.dumps(s.snapshot())))
    ops = s2.on_continue_search([a], existing={a})
    assert ops == [Resume(a), ValidateAfter(a, 3)]  # one at a time: the others come as it ends
    more = creates(s2.on_validation_completed(a, 0.9, 3))
    assert len(more) == 1 and more[0].request_id != lost.request_id
    last = creates(s2.on_validation_completed(more[0].request_id, 0.8, 3))
    assert len(last) == 1 and s2.issued == 3


def _running_after(s: Any, ops: list, running: set[str]) -> set[str]:
    """The trials with work after `ops`, applied as the master does (a Close ends its trial)."""
    for op in ops:
        if isinstance(op, Resume | Create):
            running.add(op.request_id)
        elif isinstance(op, Close):
            running.discard(op.request_id)
    return running


def test_continue_never_runs_more_than_max_concurrent_trials() -> None:
    # One at a time: a errored (out of restarts), the search moved on to b, the user killed the
    # experiment while b trained (a kill ends trials without telling the searcher), and c was
    # never created. Continuing used to reopen a and b together: two trials at once, until
    # one of them ended.
    s = make_searcher(config(max_trials=3, max_concurrent_trials=1), 1)
    (a,) = (c.request_id for c in creates(s.initial_operations()))
    (b,) = (c.request_id for c in creates(s.on_trial_exited_early(a, ExitedReason.ERRORED)))
    ops = s.on_continue_search([a, b], existing={a, b})
    assert ops == [Resume(a), ValidateAfter(a, 3)]  # b waits for a's slot
    running = _running_after(s, ops, set())
    seen: list[str] = []
    while running:
        assert len(running) <= 1, running
        rid = sorted(running)[0]
        seen.append(rid)
        ops = s.on_validation_completed(rid, 0.5, 3)
        running.discard(rid)
        running = _running_after(s, ops, running)
        assert s.on_trial_closed(rid) == []
    assert seen[:2] == [a, b] and len(seen) == 3 and s.issued == 3  # then the new one
    assert s.shut_down and s.results == 3


def test_continue_waiting_trials_survive_a_snapshot_and_a_lost_slot() -> None:
    s = make_searcher(config(max_trials=4, max_concurrent_trials=2), 1)
    a, b = (c.request_id for c in creates(s.initial_operations()))
    (c,) = (x.request_id for x in creates(s.on_trial_exited_early(a, ExitedReason.ERRORED)))
    (d,) = (x.request_id for x in creates(s.on_trial_exited_early(b, ExitedReason.ERRORED)))
    # Killed with c and d running: four unfinished trials, two slots.
    ops = s.on_continue_search([a, b, c, d], existing={a, b, c, d})
    assert ops == [Resume(a), ValidateAfter(a, 3), Resume(b), ValidateAfter(b, 3)]
    restored = make_searcher(config(max_trials=4, max_concurrent_trials=2), 9)
    restored.restore(json.loads(json.dumps(s.snapshot())))
    assert 0.0 <= restored.progress({}) < 1.0
    # a errors again: c takes its slot (a waiting trial goes before any new one).
    assert restored.on_trial_exited_early(a, ExitedReason.ERRORED) == [
        Resume(c),
        ValidateAfter(c, 3),
    ]
    # Events about a trial still waiting are ignored (it has no process).
    assert restored.on_validation_completed(d, 0.1, 3) == []
    assert restored.on_trial_closed(b) == [Resume(d), ValidateAfter(d, 3)]
    restored.on_validation_completed(c, 0.5, 3)
    assert restored.on_validation_completed(d, 0.5, 3)[-1] == Shutdown(failure=False)


def test_continue_frees_the_slot_of_a_trial_that_ended_completed() -> None:
    # The master ended b COMPLETED without telling the searcher (idle when the experiment
    # finished): it holds no slot when the search is continued.
    s = make_searcher(config(max_trials=3, max_concurrent_trials=2), 1)
    a, b = (c.request_id for c in creates(s.initial_operations()))
    (c,) = (x.request_id for x in creates(s.on_trial_exited_early(a, ExitedReason.ERRORED)))
    ops = s.on_continue_search([a, c], existing={a, b, c})
    assert ops == [Resume(a), ValidateAfter(a, 3), Resume(c), ValidateAfter(c, 3)]
    assert s.on_trial_closed(b) == []  # a late word about b changes nothing
