"""Make metric values JSON-safe: tensors/numpy scalars to numbers, NaN/inf to strings."""

from __future__ import annotations

import math
from typing import Any

NONFINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def jsonable(value: Any) -> Any:
    """A JSON-encodable copy of `value`.

    Non-finite floats become the strings "NaN", "Infinity", "-Infinity" (strict JSON has no
    token for them); objects with `.item()`/`.tolist()` (torch, numpy) are converted.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else NONFINITE[value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # numpy arrays and scalars, torch tensors
        return jsonable(tolist())
    item = getattr(value, "item", None)
    if callable(item):
        return jsonable(item())
    if isinstance(value, (set, frozenset)):
        return [jsonable(v) for v in value]
    return str(value)
