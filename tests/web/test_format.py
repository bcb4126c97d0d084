"""The pages' pure helpers: query parsing, formatting, ASHA rung summaries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from werkzeug.datastructures import MultiDict

from detlab.expconf import load_yaml, parse_experiment_config
from master.errors import BadRequest
from master.searcher import make_searcher
from master.web import format as fmt
from master.web.searcher_view import asha_brackets, searcher_summary


def test_experiment_query_from_the_query_string() -> None:
    q, page, per_page = fmt.experiment_query(
        MultiDict(
            [
                ("state", "active,paused"),
                ("state", "ERROR"),
                ("owner", " bob "),
                ("q", "resnet"),
                ("sort", "best"),
                ("order", "asc"),
                ("page", "3"),
                ("per_page", "20"),
            ]
        )
    )
    assert q.states == ("ACTIVE", "PAUSED", "ERROR")
    assert (q.owner, q.name, q.sort, q.descending) == ("bob", "resnet", "best", False)
    assert (page, per_page, q.limit, q.offset) == (3, 20, 20, 40)
    q, page, _ = fmt.experiment_query(MultiDict())
    assert (q.states, q.sort, q.descending, page, q.offset) == ((), "id", True, 1, 0)
    for bad, path in (
        ({"state": "NAPPING"}, "state"),
        ({"sort": "colour"}, "sort"),
        ({"order": "up"}, "order"),
        ({"page": "x"}, "page"),
        ({"per_page": "100000"}, "per_page"),
    ):
        with pytest.raises(BadRequest) as e:
            fmt.experiment_query(MultiDict(bad))
        assert e.value.path == path


def test_with_args_keeps_filters_and_replaces_keys() -> None:
    args = MultiDict([("state", "ACTIVE"), ("state", "PAUSED"), ("page", "2")])
    url = fmt.with_args("/experiments", args, page=3, sort="name")
    assert url == "/experiments?state=ACTIVE&state=PAUSED&page=3&sort=name"
    assert fmt.with_args("/x", args, page=None, state=None) == "/x"


def test_numbers_durations_and_hparams() -> None:
    assert fmt.metric(None) == "–"
    assert fmt.metric(0.123456) == "0.1235"
    assert fmt.metric(1234567.0) == "1.235e+06"
    assert fmt.metric(0.00001234) == "1.234e-05"
    assert fmt.metric(0.0) == "0"
    assert fmt.metric(12) == "12"
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert fmt.duration(now - timedelta(seconds=42), None, now) == "42s"
    assert fmt.duration(now - timedelta(minutes=4, seconds=10), None, now) == "4m 10s"
    assert fmt.duration(now - timedelta(hours=3, minutes=5), now, now) == "3h 05m"
    assert fmt.duration(now - timedelta(days=2, hours=1), None, now) == "2d 01h"
    assert fmt.duration(None, None, now) == "–"
    naive = datetime(2026, 1, 1, 11, 0)  # SQLite hands back naive UTC
    assert fmt.duration(naive, None, now) == "1h 00m"
    assert fmt.utc_text(naive) == "2026-01-01 11:00 UTC"
    assert fmt.flat_hparams({"opt": {"lr": 0.1, "beta": {"b1": 0.9}}, "bs": 32}) == {
        "opt.lr": 0.1,
        "opt.beta.b1": 0.9,
        "bs": 32,
    }
    assert fmt.differing_rows({"a": [1, 1], "b": [1, 2], "c": [None, None]}) == {"b": [1, 2]}
    assert fmt.int_list(MultiDict([("t", "3,1"), ("t", "3")]), "t") == [3, 1]
    with pytest.raises(BadRequest):
        fmt.int_list(MultiDict([("t", "x")]), "t")


ASHA = """
name: a
entrypoint: python3 train.py
hyperparameters: {lr: {type: double, minval: 0.0, maxval: 1.0}}
searcher: {name: adaptive_asha, metric: loss, max_length: {batches: 64}, max_trials: 8,
  divisor: 4, max_rungs: 2, mode: aggressive}
"""


def test_asha_rungs_follow_the_searcher_state() -> None:
    from master.searcher import Create

    config = parse_experiment_config(load_yaml(ASHA))
    method = make_searcher(config, seed=1)
    ops = method.initial_operations()
    created = [op.request_id for op in ops if isinstance(op, Create)]
    for op in ops:
        if isinstance(op, Create):
            method.on_trial_created(op.request_id)
    # Four trials report at rung 1 (length 16): with divisor 4 the best one is promoted.
    for rid, loss in zip(created[:4], (0.5, 0.2, 0.9, 0.7), strict=True):
        method.on_validation_completed(rid, loss, 16)
    view = asha_brackets(config, method.snapshot())
    assert len(view) == 1 and view[0].trials == 8
    first, top = view[0].rungs
    assert (first.length, first.results, first.promoted, first.best) == (16, 4, 1, 0.2)
    assert (top.length, top.results, top.promoted, top.best) == (64, 0, 0, None)
    assert asha_brackets(config, None)[0].rungs[0].results == 0
    single = parse_experiment_config(
        load_yaml(ASHA.replace("adaptive_asha", "random").replace("mode: aggressive", ""))
    )
    assert asha_brackets(single, None) == []
    labels = dict(searcher_summary(config))
    assert labels["Searcher"] == "adaptive_asha" and labels["Max length"] == "64 batches"
    assert labels["Metric"] == "loss (smaller is better)" and labels["Mode"] == "aggressive"
    single = parse_experiment_config(
        load_yaml(ASHA.replace("adaptive_asha", "single").replace("mode: aggressive", ""))
    )
    assert [k for k, _ in searcher_summary(single)] == ["Searcher", "Metric", "Max length"]
