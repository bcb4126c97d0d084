"""Training lengths: `{batches|records|epochs: N}` or a bare int meaning batches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detlab.expconf._check import describe, is_int, join
from detlab.expconf._errors import ConfigError
from detlab.expconf._limits import MAX_LENGTH

UNITS = ("batches", "records", "epochs")


def parse_length(raw: Mapping[str, Any], key: str, path: str, *, minimum: int) -> Any:
    """Normalise a length field to `{unit: N}` (or None when absent); N <= MAX_LENGTH."""
    value = raw.get(key)
    if value is None:
        return None
    here = join(path, key)
    want = f"expected an integer >= {minimum} or a mapping like {{batches: N}}"
    if is_int(value):
        if value > MAX_LENGTH:
            raise ConfigError(here, f"at most {MAX_LENGTH:,}, got {value:,}")
        if value < minimum:
            raise ConfigError(here, f"{want}, got {value}")
        return {"batches": value}
    if not isinstance(value, Mapping):
        raise ConfigError(here, f"{want}, got {describe(value)}")
    if len(value) != 1:
        raise ConfigError(here, f"{want}: exactly one of {', '.join(UNITS)}")
    ((unit, n),) = value.items()
    if unit not in UNITS:
        raise ConfigError(
            join(here, str(unit)), f"unknown length unit; expected one of {', '.join(UNITS)}"
        )
    if not is_int(n) or n < minimum:
        shown = n if is_int(n) else describe(n)
        raise ConfigError(join(here, unit), f"expected an integer >= {minimum}, got {shown}")
    if n > MAX_LENGTH:
        raise ConfigError(join(here, unit), f"at most {MAX_LENGTH:,}, got {n:,}")
    return {unit: n}
