"""`det experiment continue`'s pure decisions (master/continuation.py) and its state tables."""

from __future__ import annotations

import pytest

from detlab.expconf import ConfigError
from master.continuation import check_searcher, continued_hparams, merged_config
from master.states import (
    CONTINUE_TRANSITIONS,
    IllegalTransition,
    State,
    can_transition,
    check_continue,
)

CONST = {"type": "const", "val": 6}
RANGE = {"type": "int", "minval": 1, "maxval": 9}


def test_only_ended_experiments_continue_and_only_to_active() -> None:
    for state in (State.COMPLETED, State.CANCELED, State.ERROR):
        check_continue("experiment", 1, state)
        assert CONTINUE_TRANSITIONS[state] == {State.ACTIVE}
        assert not can_transition(state, State.ACTIVE)  # ordinary writers still cannot
    for state in set(State) - set(CONTINUE_TRANSITIONS):
        with pytest.raises(IllegalTransition, match=f"experiment 4 is {state.value}; only"):
            check_continue("experiment", 4, state)


def test_the_override_wins_and_merges_into_sections() -> None:
    active = {"searcher": {"name": "single", "max_length": {"batches": 6}, "metric": "loss"}}
    merged = merged_config(active, {"searcher": {"max_length": 10}})
    assert merged["searcher"] == {"name": "single", "max_length": 10, "metric": "loss"}
    with pytest.raises(ConfigError, match="mapping"):
        merged_config(active, [1])  # type: ignore[arg-type]


def test_only_a_single_trial_search_continues_and_stays_single() -> None:
    check_searcher("single", "single", 1, 3)
    check_searcher("random", "random", 2, 3)  # continued as it was
    check_searcher("grid", "grid", 4, 3)
    with pytest.raises(ConfigError, match="random search: it is continued as it was"):
        check_searcher("random", "random", 2, 3, overridden=True)
    with pytest.raises(ConfigError, match="adaptive_asha search with 2 trial"):
        check_searcher("adaptive_asha", "adaptive_asha", 2, 3)
    with pytest.raises(ConfigError, match="makes it a grid search"):
        check_searcher("single", "grid", 1, 3)


def test_the_trial_keeps_its_values_and_takes_new_constants() -> None:
    old = {"lr": RANGE, "steps": CONST, "net": {"type": "object", "vals": {"w": CONST}}}
    values = {"lr": 4, "steps": 6, "net": {"w": 6}}
    new = {**old, "steps": {"type": "const", "val": 10}, "extra": {"type": "const", "val": "x"}}
    assert continued_hparams(old, new, values) == {
        "lr": 4,
        "steps": 10,
        "net": {"w": 6},
        "extra": "x",
    }
    deep = {**old, "net": {"type": "object", "vals": {"w": {"type": "const", "val": 7}}}}
    assert continued_hparams(old, deep, values)["net"] == {"w": 7}


@pytest.mark.parametrize(
    ("new", "where"),
    [
        ({"steps": CONST}, "hyperparameters.lr"),  # removed
        ({"lr": {**RANGE, "maxval": 20}, "steps": CONST}, "hyperparameters.lr"),  # resampled
    ],
)
def test_a_sampled_or_removed_hyperparameter_is_refused(new: dict, where: str) -> None:
    with pytest.raises(ConfigError) as e:
        continued_hparams({"lr": RANGE, "steps": CONST}, new, {"lr": 4, "steps": 6})
    assert e.value.path == where
