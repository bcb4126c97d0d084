"""Hyperparameter spaces (the normalised form from detlab.expconf): sampling and grids.

Names are visited in sorted order so results do not depend on how a JSON store orders keys.
"""

from __future__ import annotations

import copy
import random
from typing import Any


def sample(space: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Draw one point: nested groups become nested dicts, const yields its value."""
    return {name: _sample_one(space[name], rng) for name in sorted(space)}


def _sample_one(hp: dict[str, Any], rng: random.Random) -> Any:
    kind = hp["type"]
    if kind == "const":
        return copy.deepcopy(hp["val"])
    if kind == "int":
        return rng.randint(hp["minval"], hp["maxval"])
    if kind == "double":
        return rng.uniform(hp["minval"], hp["maxval"])
    if kind == "log":
        return hp.get("base", 10.0) ** rng.uniform(hp["minval"], hp["maxval"])
    if kind == "categorical":
        return copy.deepcopy(rng.choice(hp["vals"]))
    if kind == "object":
        return sample(hp["vals"], rng)
    raise ValueError(f"unknown hyperparameter type {kind!r}")


def grid(space: dict[str, Any]) -> list[dict[str, Any]]:
    """Every point of a (small) grid as a list, in `grid_point` order: for tests and previews.

    The searcher never calls this: a grid of 10**9 points would not fit in memory.
    """
    return [grid_point(space, i) for i in range(grid_size(space))]


def grid_size(space: dict[str, Any]) -> int:
    """How many points the grid has, in O(number of hyperparameters): nothing is built."""
    size = 1
    for name in space:
        size *= _axis_size(space[name], name)
    return size


def grid_point(space: dict[str, Any], index: int) -> dict[str, Any]:
    """The `index`-th point (0-based) of the cartesian product, computed alone (lazily).

    Names are sorted and the first varies slowest (itertools.product order), so points come in
    a deterministic order however the space's keys are stored.
    """
    names = sorted(space)
    out: dict[str, Any] = {}
    for name in reversed(names):
        size = _axis_size(space[name], name)
        index, i = divmod(index, size)
        out[name] = copy.deepcopy(_axis_value(space[name], name, i))
    return {name: out[name] for name in names}


def _count(hp: dict[str, Any], name: str) -> int:
    count = hp.get("count")
    if count is None:
        raise ValueError(f"hyperparameter {name!r} needs a count for a grid search")
    return int(count)


def _axis_size(hp: dict[str, Any], name: str) -> int:
    kind = hp["type"]
    if kind == "const":
        return 1
    if kind == "categorical":
        return len(hp["vals"])
    if kind == "object":
        return grid_size(hp["vals"])
    count = _count(hp, name)
    if kind == "int":
        # int_points deduplicates: at most one point per integer of [minval, maxval].
        return 1 if count == 1 else min(count, hp["maxval"] - hp["minval"] + 1)
    if kind in ("double", "log"):
        return count
    raise ValueError(f"unknown hyperparameter type {kind!r}")


def _axis_value(hp: dict[str, Any], name: str, i: int) -> Any:
    """The i-th value of one axis: the same as `int_points`/`float_points`[i], built alone."""
    kind = hp["type"]
    if kind == "const":
        return hp["val"]
    if kind == "categorical":
        return hp["vals"][i]
    if kind == "object":
        return grid_point(hp["vals"], i)
    count = _count(hp, name)
    if kind == "int":
        lo, hi = hp["minval"], hp["maxval"]
        if count == 1:
            return (lo + hi) // 2
        if count > hi - lo + 1:  # spacing below 1: every integer, once
            return lo + i
        steps = count - 1  # spacing >= 1: the rounded points are all distinct
        return lo + ((hi - lo) * i * 2 + steps) // (2 * steps)
    lo_f, hi_f = float(hp["minval"]), float(hp["maxval"])
    if count == 1:
        x = (lo_f + hi_f) / 2.0
    else:
        x = lo_f + (hi_f - lo_f) * i / (count - 1) if i < count - 1 else hi_f
    return hp.get("base", 10.0) ** x if kind == "log" else x


def float_points(lo: float, hi: float, count: int) -> list[float]:
    """`count` evenly spaced points including both ends; one point is the midpoint."""
    if count == 1:
        return [(lo + hi) / 2.0]
    return [lo + (hi - lo) * i / (count - 1) if i < count - 1 else hi for i in range(count)]


def int_points(lo: int, hi: int, count: int) -> list[int]:
    """Evenly spaced ints including both ends, deduplicated (never more than hi-lo+1)."""
    if count == 1:
        return [(lo + hi) // 2]
    out: list[int] = []
    steps = count - 1
    for i in range(count):
        # lo + round((hi - lo) * i / steps), half up, in exact integer arithmetic.
        n = lo + ((hi - lo) * i * 2 + steps) // (2 * steps)
        if not out or out[-1] != n:
            out.append(n)
    return out
