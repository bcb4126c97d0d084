"""Small typed field readers shared by the schema sections; every failure names its path."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from detlab.expconf._errors import ConfigError


class _Required:
    """Sentinel default: the field must be present."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def join(path: str, key: str) -> str:
    """Dotted child path; the root path is ""."""
    return f"{path}.{key}" if path else key


def item(path: str, index: int) -> str:
    """Path of a list element, `bind_mounts[0]`."""
    return f"{path}[{index}]"


def describe(value: Any) -> str:
    """A short rendering of a bad value for error messages."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_int(value: Any) -> bool:
    """True for ints but not bools (YAML `yes` must not pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """True for finite ints and floats, never bools."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


def mapping(raw: Any, path: str, allowed: Iterable[str]) -> dict[str, Any]:
    """Check `raw` is a mapping with only `allowed` keys; suggest the closest key for typos."""
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a mapping, got {describe(raw)}")
    allowed = list(allowed)
    for key in raw:
        if not isinstance(key, str):
            raise ConfigError(path, f"keys must be strings, got {describe(key)}")
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "valid keys: " + ", ".join(allowed)
            raise ConfigError(join(path, key), f"unknown key; {hint}")
    return dict(raw)


def _absent(raw: Mapping[str, Any], key: str, path: str, default: Any) -> bool:
    if raw.get(key) is not None:
        return False
    if default is REQUIRED:
        raise ConfigError(join(path, key), "required")
    return True


def get_int(
    raw: Mapping[str, Any],
    key: str,
    path: str,
    default: Any = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    limit: int | None = None,
) -> Any:
    """An int (not a bool) within [minimum, maximum] and at most `limit`; None/absent -> default."""
    if _absent(raw, key, path, default):
        return default
    return expect_int(raw[key], join(path, key), minimum=minimum, maximum=maximum, limit=limit)


def expect_int(
    value: Any,
    path: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    limit: int | None = None,
) -> int:
    """Check one int value (not a bool) against its bounds.

    `maximum` is part of the field's meaning (priority 1-99); `limit` is what the master can
    honour (a column, a search it can run), reported as "at most".
    """
    if minimum is not None and maximum is not None:
        want = f"an integer between {minimum} and {maximum}"
    elif minimum is not None:
        want = f"an integer >= {minimum}"
    else:
        want = "an integer"
    if not is_int(value):
        raise ConfigError(path, f"expected {want}, got {describe(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ConfigError(path, f"expected {want}, got {value}")
    if limit is not None and value > limit:
        raise ConfigError(path, f"at most {limit:,}, got {value:,}")
    return int(value)


def get_number(
    raw: Mapping[str, Any],
    key: str,
    path: str,
    default: Any = None,
    *,
    above: float | None = None,
    at_most: float | None = None,
) -> Any:
    """A finite number as float, strictly greater than `above` and at most `at_most` if given."""
    if _absent(raw, key, path, default):
        return default
    value = raw[key]
    want = "a number" if above is None else f"a number > {above:g}"
    if not is_number(value):
        raise ConfigError(join(path, key), f"expected {want}, got {describe(value)}")
    if above is not None and value <= above:
        raise ConfigError(join(path, key), f"expected {want}, got {value}")
    if at_most is not None and value > at_most:
        raise ConfigError(join(path, key), f"at most {at_most:g}, got {value:g}")
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        raise ConfigError(join(path, key), f"expected {want}, got {describe(value)}") from None


def get_bool(raw: Mapping[str, Any], key: str, path: str, default: Any = None) -> Any:
    """A real bool (true/false), not 0/1 or strings."""
    if _absent(raw, key, path, default):
        return default
    value = raw[key]
    if not isinstance(value, bool):
        raise ConfigError(join(path, key), f"expected true or false, got {describe(value)}")
    return value


def get_str(
    raw: Mapping[str, Any],
    key: str,
    path: str,
    default: Any = None,
    *,
    choices: Iterable[str] | None = None,
    allow_empty: bool = False,
    max_len: int | None = None,
) -> Any:
    """A string, non-empty unless allowed, one of `choices` when given, at most `max_len`."""
    if _absent(raw, key, path, default):
        return default
    value = raw[key]
    if not isinstance(value, str):
        raise ConfigError(join(path, key), f"expected a string, got {describe(value)}")
    if not allow_empty and not value.strip():
        raise ConfigError(join(path, key), "must not be empty")
    if max_len is not None and len(value) > max_len:
        raise ConfigError(join(path, key), f"at most {max_len:,} characters, got {len(value):,}")
    if choices is not None:
        choices = list(choices)
        if value not in choices:
            raise ConfigError(
                join(path, key), f"expected one of {', '.join(choices)}, got {value!r}"
            )
    return value


def get_str_list(
    raw: Mapping[str, Any],
    key: str,
    path: str,
    default: Any = None,
    *,
    max_len: int | None = None,
    max_items: int | None = None,
) -> Any:
    """A list of strings (each at most `max_len` characters, at most `max_items` of them)."""
    if _absent(raw, key, path, default):
        return list(default) if isinstance(default, list) else default
    value = raw[key]
    here = join(path, key)
    if not isinstance(value, list):
        raise ConfigError(here, f"expected a list of strings, got {describe(value)}")
    if max_items is not None and len(value) > max_items:
        raise ConfigError(here, f"at most {max_items:,} items, got {len(value):,}")
    for i, element in enumerate(value):
        if not isinstance(element, str):
            raise ConfigError(item(here, i), f"expected a string, got {describe(element)}")
        if max_len is not None and len(element) > max_len:
            raise ConfigError(
                item(here, i), f"at most {max_len:,} characters, got {len(element):,}"
            )
    return list(value)


def get_absolute_path(raw: Mapping[str, Any], key: str, path: str, default: Any = None) -> Any:
    """An absolute filesystem path (the master and agents must agree on where it is)."""
    value = get_str(raw, key, path, default)
    if value is not None and not value.startswith("/"):
        raise ConfigError(join(path, key), f"expected an absolute path, got {describe(value)}")
    if value is not None and ".." in value.split("/"):
        # `/data/../../etc` is `/etc`: say where you mean, so a check on the path holds.
        raise ConfigError(join(path, key), f"must not contain '..', got {describe(value)}")
    return value


def json_value(value: Any, path: str) -> Any:
    """Deep-copy a pass-through value, rejecting what JSON cannot carry (dates, sets, NaN)."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(path, f"expected a finite number, got {value!r}")
        return value
    if isinstance(value, list | tuple):
        return [json_value(v, item(path, i)) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(path, f"keys must be strings, got {describe(k)}")
            out[k] = json_value(v, join(path, k))
        return out
    raise ConfigError(path, f"expected a JSON value, got {describe(value)}")


def get_json(
    raw: Mapping[str, Any], key: str, path: str, default: Any = None, *, kind: type | None = None
) -> Any:
    """A pass-through JSON value (optionally of `kind` dict/list), copied."""
    if _absent(raw, key, path, default):
        return json_value(default, join(path, key))
    value = raw[key]
    if kind is dict and not isinstance(value, Mapping):
        raise ConfigError(join(path, key), f"expected a mapping, got {describe(value)}")
    if kind is list and not isinstance(value, list):
        raise ConfigError(join(path, key), f"expected a list, got {describe(value)}")
    return json_value(value, join(path, key))
