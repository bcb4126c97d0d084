"""The searcher base and the `single` searcher: op sequences, determinism, snapshot/restore."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detlab.expconf import ConfigError, ExperimentConfig, parse_experiment_config
from master.searcher import (
    SEARCH_METHODS,
    Close,
    Create,
    ExitedReason,
    Operation,
    SearchMethod,
    Shutdown,
    SingleSearch,
    ValidateAfter,
    make_searcher,
    operation_from_json,
    operation_to_json,
)
from master.searcher.base import new_request_id, rng_from_json, rng_state_to_json


def config(**searcher: Any) -> ExperimentConfig:
    s: dict[str, Any] = {"name": "single", "metric": "loss", "max_length": {"batches": 100}}
    s.update(searcher)
    return parse_experiment_config(
        {
            "entrypoint": "python3 train.py",
            "hyperparameters": {
                "lr": {"type": "log", "minval": -4, "maxval": -1},
                "layers": {"type": "int", "minval": 1, "maxval": 4},
                "opt": {"name": {"type": "categorical", "vals": ["adam", "sgd"]}},
                "bs": 32,
            },
            "searcher": s,
        }
    )


def start(seed: int = 7, **searcher: Any) -> tuple[SearchMethod, Create, ValidateAfter]:
    s = make_searcher(config(**searcher), seed)
    ops = s.initial_operations()
    assert len(ops) == 2
    create, validate = ops
    assert isinstance(create, Create) and isinstance(validate, ValidateAfter)
    return s, create, validate


# -- make_searcher --------------------------------------------------------------------------


def test_make_searcher_single() -> None:
    s = make_searcher(config(), 1)
    assert isinstance(s, SingleSearch) and s.name == "single"
    assert SEARCH_METHODS["single"] is SingleSearch


def test_every_documented_searcher_is_implemented() -> None:
    from detlab.expconf import SEARCHERS

    assert set(SEARCHERS) <= set(SEARCH_METHODS)


def test_make_searcher_unknown_name() -> None:
    c = config()
    c = c.replace(searcher=dataclasses.replace(c.searcher, name="pbt"))
    with pytest.raises(ConfigError, match="searcher.name: unknown searcher 'pbt'"):
        make_searcher(c, 1)


# -- the op sequence ------------------------------------------------------------------------


def test_initial_operations() -> None:
    s, create, validate = start()
    assert validate == ValidateAfter(create.request_id, 100)
    assert 0 <= create.seed <= 2**31 - 1
    assert set(create.hparams) == {"lr", "layers", "opt", "bs"}
    assert 1e-4 <= create.hparams["lr"] <= 1e-1
    assert create.hparams["bs"] == 32 and create.hparams["opt"]["name"] in ("adam", "sgd")
    assert s.initial_operations() == []  # asking again creates nothing more


def test_validate_after_uses_max_length_value_in_its_unit() -> None:
    _, create, validate = start(max_length={"records": 6400})
    assert validate.length == 6400


def test_time_based_single_uses_max_time() -> None:
    _, _, validate = start(max_length=None, time_metric="batches", max_time=300)
    assert validate.length == 300


def test_full_run() -> None:
    s, create, _ = start()
    rid = create.request_id
    assert s.on_trial_created(rid) == []
    assert s.progress({}) == 0.0
    assert s.progress({rid: 25}) == 0.25
    assert s.on_validation_completed(rid, 0.5, 100) == [Close(rid), Shutdown(failure=False)]
    assert s.progress({rid: 100}) == 1.0
    assert s.progress({}) == 1.0
    assert s.on_trial_closed(rid) == []
    assert s.on_validation_completed(rid, 0.4, 100) == []


def test_progress_capped() -> None:
    s, create, _ = start()
    assert s.progress({create.request_id: 250}) == 1.0
    assert s.progress({"someone-else": 50}) == 0.0


def test_progress_before_start() -> None:
    assert make_searcher(config(), 1).progress({}) == 0.0


def test_early_validation_below_target_ignored() -> None:
    s, create, _ = start()
    assert s.on_validation_completed(create.request_id, 0.9, 50) == []
    assert s.on_validation_completed(create.request_id, 0.5, 100)[-1] == Shutdown()


@pytest.mark.parametrize("reason", list(ExitedReason))
def test_exited_early_shuts_down_with_failure(reason: ExitedReason) -> None:
    s, create, _ = start()
    assert s.on_trial_exited_early(create.request_id, reason) == [Shutdown(failure=True)]
    assert s.on_trial_closed(create.request_id) == []
    assert s.on_trial_exited_early(create.request_id, reason) == []


def test_exited_early_after_completion_is_ignored() -> None:
    s, create, _ = start()
    s.on_validation_completed(create.request_id, 0.1, 100)
    assert s.on_trial_exited_early(create.request_id, ExitedReason.ERRORED) == []


def test_closed_before_completion_is_a_failed_search() -> None:
    s, create, _ = start()
    assert s.on_trial_closed(create.request_id) == [Shutdown(failure=True)]


def test_unknown_request_ids_are_ignored() -> None:
    s, _, _ = start()
    assert s.on_trial_created("nope") == []
    assert s.on_validation_completed("nope", 1.0, 100) == []
    assert s.on_trial_exited_early("nope", ExitedReason.ERRORED) == []
    assert s.on_trial_closed("nope") == []


def test_exited_reason_values() -> None:
    assert [r.value for r in ExitedReason] == ["INVALID_HP", "ERRORED", "USER_CANCELED"]
    assert ExitedReason("INVALID_HP") is ExitedReason.INVALID_HP
    assert ExitedReason.ERRORED == "ERRORED"


# -- determinism and persistence ------------------------------------------------------------


def test_same_seed_same_trial() -> None:
    _, a, _ = start(seed=11)
    _, b, _ = start(seed=11)
    assert a == b


def test_different_seed_different_trial() -> None:
    _, a, _ = start(seed=1)
    _, b, _ = start(seed=2)
    assert a.request_id != b.request_id and a.seed != b.seed


def test_snapshot_is_json() -> None:
    s, create, _ = start()
    snap = s.snapshot()
    assert json.loads(json.dumps(snap)) == snap
    assert snap["searcher"] == "single" and snap["state"]["request_id"] == create.request_id


def test_restore_rejects_other_searcher() -> None:
    s, _, _ = start()
    snap = s.snapshot()
    snap["searcher"] = "grid"
    with pytest.raises(ValueError, match="grid"):
        make_searcher(config(), 7).restore(snap)


Event = tuple[str, Any]


def drive(s: SearchMethod, events: list[Event], rid: str) -> list[Any]:
    """Feed events; record each reply and the progress after it."""
    out: list[Any] = []
    for kind, arg in events:
        if kind == "created":
            out.append(s.on_trial_created(rid))
        elif kind == "validated":
            out.append(s.on_validation_completed(rid, 0.5, arg))
        elif kind == "exited":
            out.append(s.on_trial_exited_early(rid, arg))
        elif kind == "closed":
            out.append(s.on_trial_closed(rid))
        out.append(s.progress({rid: 10}))
    return out


_events = st.lists(
    st.one_of(
        st.tuples(st.just("created"), st.none()),
        st.tuples(st.just("validated"), st.sampled_from([50, 100, 150])),
        st.tuples(st.just("exited"), st.sampled_from(list(ExitedReason))),
        st.tuples(st.just("closed"), st.none()),
    ),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**63), events=_events, cut=st.integers(0, 6))
def test_property_snapshot_restore_equals_uninterrupted(
    seed: int, events: list[Event], cut: int
) -> None:
    cfg = config()
    straight = make_searcher(cfg, seed)
    ops = straight.initial_operations()
    rid = ops[0].request_id
    expected = drive(straight, events, rid)

    first = make_searcher(cfg, seed)
    assert first.initial_operations() == ops
    got = drive(first, events[:cut], rid)
    snap = json.loads(json.dumps(first.snapshot()))
    resumed = make_searcher(cfg, seed + 1)  # a different seed: restore must override it
    resumed.restore(snap)
    got += drive(resumed, events[cut:], rid)
    assert got == expected
    assert resumed.snapshot() == straight.snapshot()


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**63))
def test_property_deterministic_initial_operations(seed: int) -> None:
    cfg = config()
    assert (
        make_searcher(cfg, seed).initial_operations()
        == make_searcher(cfg, seed).initial_operations()
    )


# -- shared helpers -------------------------------------------------------------------------


def test_rng_state_round_trip() -> None:
    rng = random.Random(3)
    rng.random()
    rng.gauss(0, 1)  # sets gauss_next
    state = json.loads(json.dumps(rng_state_to_json(rng)))
    copy = rng_from_json(state)
    assert [copy.random() for _ in range(5)] == [rng.random() for _ in range(5)]
    assert copy.gauss(0, 1) == rng.gauss(0, 1)


def test_request_ids_deterministic_and_uuid_shaped() -> None:
    a = [new_request_id(random.Random(9)) for _ in range(2)]
    assert a[0] == a[1] and len(a[0]) == 36 and a[0][14] == "4"
    rng = random.Random(9)
    assert new_request_id(rng) != new_request_id(rng)


@pytest.mark.parametrize(
    "op",
    [
        Create("r", {"a": {"b": 1}}, 5),
        ValidateAfter("r", 100),
        Close("r"),
        Shutdown(),
        Shutdown(failure=True),
    ],
)
def test_operation_json_round_trip(op: Operation) -> None:
    data = json.loads(json.dumps(operation_to_json(op)))
    assert operation_from_json(data) == op


def test_operation_from_json_unknown() -> None:
    with pytest.raises(ValueError):
        operation_from_json({"type": "explode"})
