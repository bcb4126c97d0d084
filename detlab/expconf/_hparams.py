"""Hyperparameter normalisation (Determined's forms; a mapping without `type` is a nested group)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from detlab.expconf._check import (
    REQUIRED,
    describe,
    get_int,
    get_number,
    join,
    json_value,
    mapping,
)
from detlab.expconf._errors import ConfigError
from detlab.expconf._limits import MAX_HP_INT, MAX_TRIALS

TYPES = ("const", "int", "double", "log", "categorical", "object")
NUMERIC = ("int", "double", "log")
_KEYS = {
    "const": ("type", "val"),
    "int": ("type", "minval", "maxval", "count"),
    "double": ("type", "minval", "maxval", "count"),
    "log": ("type", "minval", "maxval", "base", "count"),
    "categorical": ("type", "vals"),
    "object": ("type", "vals"),
}


def normalize_hyperparameters(raw: Any, path: str = "hyperparameters") -> dict[str, Any]:
    """Normalise a group of hyperparameters: every leaf becomes a typed definition."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a mapping of names to values, got {describe(raw)}")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(path, f"hyperparameter names must be strings, got {describe(name)}")
        out[name] = normalize_hyperparameter(value, join(path, name))
    return out


def normalize_hyperparameter(raw: Any, path: str) -> dict[str, Any]:
    """One hyperparameter: a definition (mapping with `type`), a nested group, or a const."""
    if not isinstance(raw, Mapping):
        return {"type": "const", "val": json_value(raw, path)}
    if "type" not in raw:
        return {"type": "object", "vals": normalize_hyperparameters(raw, path)}
    kind = raw["type"]
    if kind not in TYPES:
        raise ConfigError(
            join(path, "type"), f"expected one of {', '.join(TYPES)}, got {describe(kind)}"
        )
    fields = mapping(raw, path, _KEYS[kind])
    if kind == "const":
        if "val" not in fields:
            raise ConfigError(join(path, "val"), "required")
        return {"type": "const", "val": json_value(fields["val"], join(path, "val"))}
    if kind == "categorical":
        vals = fields.get("vals")
        if not isinstance(vals, list) or not vals:
            raise ConfigError(
                join(path, "vals"), f"expected a non-empty list, got {describe(vals)}"
            )
        return {"type": "categorical", "vals": json_value(vals, join(path, "vals"))}
    if kind == "object":
        vals = fields.get("vals")
        if not isinstance(vals, Mapping):
            raise ConfigError(join(path, "vals"), f"expected a mapping, got {describe(vals)}")
        return {"type": "object", "vals": normalize_hyperparameters(vals, join(path, "vals"))}
    return _numeric(kind, fields, path)


def _numeric(kind: str, fields: dict[str, Any], path: str) -> dict[str, Any]:
    """int/double/log ranges: bounds ordered, ints for int, count >= 1 when given."""
    if kind == "int":
        lo = get_int(fields, "minval", path, REQUIRED, minimum=-MAX_HP_INT, limit=MAX_HP_INT)
        hi = get_int(fields, "maxval", path, REQUIRED, minimum=-MAX_HP_INT, limit=MAX_HP_INT)
    else:
        lo = get_number(fields, "minval", path, REQUIRED)
        hi = get_number(fields, "maxval", path, REQUIRED)
    if lo > hi:
        raise ConfigError(join(path, "maxval"), f"must be >= minval ({lo:g}), got {hi:g}")
    if kind != "int" and not math.isfinite(hi - lo):
        # Sampling draws lo + (hi - lo) * u: an infinite span gives inf/NaN hyperparameters.
        raise ConfigError(join(path, "maxval"), f"maxval - minval must be finite, got {hi:g}")
    out: dict[str, Any] = {"type": kind, "minval": lo, "maxval": hi}
    if kind == "log":
        base = get_number(fields, "base", path, 10.0, above=0.0)
        if base == 1.0:
            raise ConfigError(join(path, "base"), "expected a number > 0 other than 1, got 1")
        for key, exponent in (("minval", lo), ("maxval", hi)):
            try:
                finite = math.isfinite(base**exponent) and base**exponent > 0
            except OverflowError:
                finite = False
            if not finite:
                raise ConfigError(
                    join(path, key),
                    f"base**{key} must be a finite positive number, got {base:g}**{exponent:g}",
                )
        out["base"] = base
    count = get_int(fields, "count", path, None, minimum=1, limit=MAX_TRIALS)
    if count is not None:
        out["count"] = count
    return out


def check_grid(space: dict[str, Any], path: str = "hyperparameters") -> None:
    """The grid searcher needs a `count` on every int/double/log hyperparameter."""
    for name, hp in space.items():
        here = join(path, name)
        if hp["type"] == "object":
            check_grid(hp["vals"], here)
        elif hp["type"] in NUMERIC and hp.get("count") is None:
            raise ConfigError(join(here, "count"), "required by the grid searcher")
