"""Hyperparameter spaces (the normalised form from detlab.expconf): sampling and grids.

Names are visited in sorted order so results do not depend on how a JSON store orders keys.
"""

from __future__ import annotations

import copy
import itertools
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
    """Every point of the grid (cartesian product), in a deterministic order.

    The first name (sorted) varies slowest. int/double/log need `count`.
    """
    names = sorted(space)
    axes = [_axis(space[name], name) for name in names]
    return [
        dict(zip(names, copy.deepcopy(combo), strict=True)) for combo in itertools.product(*axes)
    ]


def grid_size(space: dict[str, Any]) -> int:
    """How many points `grid(space)` has, without building them."""
    size = 1
    for name in space:
        hp = space[name]
        size *= grid_size(hp["vals"]) if hp["type"] == "object" else len(_axis(hp, name))
    return size


def _axis(hp: dict[str, Any], name: str) -> list[Any]:
    kind = hp["type"]
    if kind == "const":
        return [hp["val"]]
    if kind == "categorical":
        return list(hp["vals"])
    if kind == "object":
        return grid(hp["vals"])
    count = hp.get("count")
    if count is None:
        raise ValueError(f"hyperparameter {name!r} needs a count for a grid search")
    if kind == "int":
        return int_points(hp["minval"], hp["maxval"], count)
    points = float_points(float(hp["minval"]), float(hp["maxval"]), count)
    if kind == "log":
        base = hp.get("base", 10.0)
        return [base**x for x in points]
    if kind == "double":
        return points
    raise ValueError(f"unknown hyperparameter type {kind!r}")


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
