"""Hyperparameter spaces: sampling stays in bounds and is deterministic; grids are products."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detlab.expconf import validate_experiment_config
from master.searcher.hparams import float_points, grid, grid_size, int_points, sample


def space_of(raw: dict[str, Any]) -> dict[str, Any]:
    """Normalise a raw hyperparameters mapping through the real schema."""
    config = validate_experiment_config(
        {
            "entrypoint": "x",
            "hyperparameters": raw,
            "searcher": {"name": "single", "metric": "m", "max_length": 1},
        }
    )
    return config["hyperparameters"]


SPACE = space_of(
    {
        "const": 3,
        "i": {"type": "int", "minval": 1, "maxval": 4},
        "d": {"type": "double", "minval": -1.0, "maxval": 1.0},
        "l": {"type": "log", "minval": -4, "maxval": -1},
        "l2": {"type": "log", "minval": 0, "maxval": 3, "base": 2},
        "c": {"type": "categorical", "vals": ["a", "b", {"x": 1}]},
        "opt": {"name": "adam", "beta": {"type": "double", "minval": 0.8, "maxval": 0.99}},
    }
)


def test_sample_shapes_and_bounds() -> None:
    rng = random.Random(0)
    for _ in range(200):
        p = sample(SPACE, rng)
        assert set(p) == {"const", "i", "d", "l", "l2", "c", "opt"}
        assert p["const"] == 3
        assert isinstance(p["i"], int) and 1 <= p["i"] <= 4
        assert -1.0 <= p["d"] <= 1.0
        assert 1e-4 <= p["l"] <= 1e-1
        assert 1.0 <= p["l2"] <= 8.0
        assert p["c"] in ["a", "b", {"x": 1}]
        assert p["opt"]["name"] == "adam" and 0.8 <= p["opt"]["beta"] <= 0.99


def test_sample_covers_int_range_inclusive() -> None:
    rng = random.Random(1)
    seen = {sample(SPACE, rng)["i"] for _ in range(300)}
    assert seen == {1, 2, 3, 4}


def test_sample_deterministic_for_seed() -> None:
    a = [sample(SPACE, random.Random(42)) for _ in range(3)]
    b = [sample(SPACE, random.Random(42)) for _ in range(3)]
    assert a == b
    assert sample(SPACE, random.Random(1)) != sample(SPACE, random.Random(2))


def test_sample_independent_of_key_order() -> None:
    reordered = dict(reversed(list(SPACE.items())))
    assert sample(SPACE, random.Random(5)) == sample(reordered, random.Random(5))


def test_sample_returns_copies() -> None:
    p = sample(SPACE, random.Random(0))
    p["opt"]["name"] = "changed"
    assert SPACE["opt"]["vals"]["name"]["val"] == "adam"


def test_sample_empty_space() -> None:
    assert sample({}, random.Random(0)) == {}


def test_grid_product_and_order() -> None:
    space = space_of(
        {
            "b": {"type": "categorical", "vals": ["x", "y"]},
            "a": {"type": "int", "minval": 0, "maxval": 10, "count": 3},
            "k": 7,
        }
    )
    assert grid(space) == [
        {"a": 0, "b": "x", "k": 7},
        {"a": 0, "b": "y", "k": 7},
        {"a": 5, "b": "x", "k": 7},
        {"a": 5, "b": "y", "k": 7},
        {"a": 10, "b": "x", "k": 7},
        {"a": 10, "b": "y", "k": 7},
    ]
    assert grid_size(space) == 6


def test_grid_double_and_log_points_include_endpoints() -> None:
    space = space_of(
        {
            "d": {"type": "double", "minval": 0, "maxval": 1, "count": 5},
            "l": {"type": "log", "minval": -3, "maxval": -1, "count": 3},
        }
    )
    points = grid(space)
    assert sorted({p["d"] for p in points}) == [0.0, 0.25, 0.5, 0.75, 1.0]
    ls = sorted({p["l"] for p in points})
    assert len(ls) == 3
    for got, want in zip(ls, [1e-3, 1e-2, 1e-1], strict=True):
        assert math.isclose(got, want)


def test_grid_nested_groups() -> None:
    space = space_of(
        {"opt": {"name": {"type": "categorical", "vals": ["adam", "sgd"]}, "m": 0.9}, "n": 1}
    )
    assert grid(space) == [
        {"n": 1, "opt": {"m": 0.9, "name": "adam"}},
        {"n": 1, "opt": {"m": 0.9, "name": "sgd"}},
    ]
    assert grid_size(space) == 2


def test_grid_points_are_independent_copies() -> None:
    space = space_of({"c": {"type": "categorical", "vals": [{"x": [1]}]}, "d": 2})
    points = grid(space)
    points[0]["c"]["x"].append(2)
    assert space["c"]["vals"][0] == {"x": [1]}


def test_grid_int_dedup_when_count_exceeds_range() -> None:
    space = space_of({"i": {"type": "int", "minval": 1, "maxval": 3, "count": 10}})
    assert [p["i"] for p in grid(space)] == [1, 2, 3]
    assert grid_size(space) == 3


def test_count_one_is_midpoint() -> None:
    assert int_points(0, 10, 1) == [5]
    assert float_points(0.0, 1.0, 1) == [0.5]


def test_int_points_examples() -> None:
    assert int_points(0, 10, 3) == [0, 5, 10]
    assert int_points(1, 4, 2) == [1, 4]
    assert int_points(0, 3, 3) == [0, 2, 3]  # 1.5 rounds half up
    assert int_points(5, 5, 4) == [5]
    big = 2**60
    assert int_points(0, big, 3) == [0, big // 2, big]


def test_grid_without_count_fails() -> None:
    space = space_of({"d": {"type": "double", "minval": 0, "maxval": 1}})
    with pytest.raises(ValueError, match="count"):
        grid(space)


def test_grid_empty_space_is_one_point() -> None:
    assert grid({}) == [{}]
    assert grid_size({}) == 1


@settings(max_examples=200, deadline=None)
@given(
    lo=st.integers(-(10**6), 10**6),
    width=st.integers(0, 10**6),
    count=st.integers(1, 50),
)
def test_property_int_points(lo: int, width: int, count: int) -> None:
    hi = lo + width
    points = int_points(lo, hi, count)
    assert points == sorted(set(points))
    assert all(lo <= p <= hi for p in points)
    assert len(points) <= min(count, width + 1)
    if count > 1:
        assert (points[0], points[-1]) == (lo, hi)


@settings(max_examples=200, deadline=None)
@given(
    bounds=st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=2),
    count=st.integers(1, 30),
)
def test_property_float_points(bounds: list[float], count: int) -> None:
    lo, hi = sorted(bounds)
    points = float_points(lo, hi, count)
    assert len(points) == count
    assert all(lo <= p <= hi for p in points)
    if count > 1:
        assert (points[0], points[-1]) == (lo, hi)


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    lo=st.integers(-50, 50),
    width=st.integers(0, 50),
    dlo=st.floats(-100, 100),
    dwidth=st.floats(0, 100),
)
def test_property_sample_in_bounds_and_deterministic(
    seed: int, lo: int, width: int, dlo: float, dwidth: float
) -> None:
    space = space_of(
        {
            "i": {"type": "int", "minval": lo, "maxval": lo + width},
            "d": {"type": "double", "minval": dlo, "maxval": dlo + dwidth},
            "g": {"l": {"type": "log", "minval": -2, "maxval": 2, "base": 3}},
        }
    )
    p = sample(space, random.Random(seed))
    assert lo <= p["i"] <= lo + width
    assert dlo <= p["d"] <= dlo + dwidth
    assert 3**-2 - 1e-12 <= p["g"]["l"] <= 3**2 + 1e-9
    assert p == sample(space, random.Random(seed))


@settings(max_examples=100, deadline=None)
@given(
    counts=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    cats=st.lists(st.integers(), min_size=1, max_size=3),
)
def test_property_grid_size_matches_grid(counts: list[int], cats: list[int]) -> None:
    raw: dict[str, Any] = {
        f"h{i}": {"type": "int", "minval": 0, "maxval": 2, "count": c} for i, c in enumerate(counts)
    }
    raw["cat"] = {"type": "categorical", "vals": cats}
    space = space_of(raw)
    points = grid(space)
    expected = len(cats)
    for c in counts:
        expected *= len(int_points(0, 2, c))
    assert len(points) == grid_size(space) == expected
    assert all(
        p["cat"] in cats and all(0 <= p[f"h{i}"] <= 2 for i in range(len(counts))) for p in points
    )
