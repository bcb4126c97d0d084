"""The `searcher` section: which search, what it optimises, how long trials train."""

from __future__ import annotations

from typing import Any

from detlab.expconf._check import (
    REQUIRED,
    describe,
    expect_int,
    get_bool,
    get_int,
    get_number,
    get_str,
    item,
    join,
    mapping,
)
from detlab.expconf._errors import ConfigError
from detlab.expconf._lengths import parse_length
from detlab.expconf._limits import (
    INT32_MAX,
    MAX_DIVISOR,
    MAX_LENGTH,
    MAX_RUNGS,
    MAX_SHORT,
    MAX_TRIALS,
)

SEARCHERS = ("single", "grid", "random", "adaptive_asha")
MODES = ("aggressive", "standard", "conservative")
SAMPLERS = ("random", "tpe", "gp")  # how adaptive_asha proposes new trials
_KEYS = (
    "name",
    "metric",
    "smaller_is_better",
    "max_length",
    "max_trials",
    "max_concurrent_trials",
    "mode",
    "divisor",
    "max_rungs",
    "sampler",
    "bracket_rungs",
    "stop_once",
    "time_metric",
    "max_time",
    "source_trial_id",
    "source_checkpoint_uuid",
)
DEFAULT_MAX_CONCURRENT_TRIALS = 16


def parse_searcher(raw: Any) -> dict[str, Any]:
    """Validate and fill the searcher section (every key present in the result)."""
    path = "searcher"
    if raw is None:
        raise ConfigError(path, "required")
    fields = mapping(raw, path, _KEYS)
    name = fields.get("name")
    if name is None:
        raise ConfigError(join(path, "name"), f"required; one of {', '.join(SEARCHERS)}")
    if name not in SEARCHERS:
        raise ConfigError(
            join(path, "name"),
            f"unknown searcher {describe(name)}; expected one of {', '.join(SEARCHERS)}",
        )
    single = name == "single"
    out: dict[str, Any] = {
        "name": name,
        "metric": get_str(fields, "metric", path, REQUIRED, max_len=MAX_SHORT),
        "smaller_is_better": get_bool(fields, "smaller_is_better", path, True),
        "max_length": parse_length(fields, "max_length", path, minimum=1),
        "max_trials": _max_trials(fields, name),
        "max_concurrent_trials": _max_concurrent(fields, single),
        "mode": get_str(fields, "mode", path, "standard", choices=MODES),
        "divisor": get_number(fields, "divisor", path, 4.0, above=1.0, at_most=MAX_DIVISOR),
        "max_rungs": get_int(fields, "max_rungs", path, 5, minimum=1, limit=MAX_RUNGS),
        "sampler": get_str(fields, "sampler", path, "random", choices=SAMPLERS),
        "bracket_rungs": _bracket_rungs(fields),
        "stop_once": get_bool(fields, "stop_once", path, False),
        "time_metric": get_str(fields, "time_metric", path, None, max_len=MAX_SHORT),
        "max_time": get_int(fields, "max_time", path, None, minimum=1, limit=MAX_LENGTH),
        "source_trial_id": get_int(
            fields, "source_trial_id", path, None, minimum=0, limit=INT32_MAX
        ),
        "source_checkpoint_uuid": get_str(
            fields, "source_checkpoint_uuid", path, None, max_len=MAX_SHORT
        ),
    }
    _check_length_or_time(out)
    return out


def _max_trials(fields: dict[str, Any], name: str) -> Any:
    """single runs one trial (a leftover max_trials is checked, then ignored); grid runs its
    whole grid unless capped; random and ASHA must be told."""
    default = REQUIRED if name in ("random", "adaptive_asha") else None
    value = get_int(fields, "max_trials", "searcher", default, minimum=1, limit=MAX_TRIALS)
    return 1 if name == "single" else value


def _max_concurrent(fields: dict[str, Any], single: bool) -> int:
    """0 means no limit beyond max_trials; single always runs its one trial alone."""
    value = get_int(
        fields,
        "max_concurrent_trials",
        "searcher",
        DEFAULT_MAX_CONCURRENT_TRIALS,
        minimum=0,
        limit=MAX_TRIALS,
    )
    return 1 if single else value


def _bracket_rungs(fields: dict[str, Any]) -> Any:
    value = fields.get("bracket_rungs")
    if value is None:
        return None
    here = "searcher.bracket_rungs"
    if not isinstance(value, list):
        raise ConfigError(here, f"expected a list of integers >= 1, got {describe(value)}")
    if len(value) > MAX_RUNGS:
        raise ConfigError(here, f"at most {MAX_RUNGS} brackets, got {len(value):,}")
    for i, n in enumerate(value):
        expect_int(n, item(here, i), minimum=1, limit=MAX_RUNGS)
    return list(value)


def _check_length_or_time(out: dict[str, Any]) -> None:
    """Either max_length, or the time_metric/max_time pair, never both or neither."""
    has_metric, has_time = out["time_metric"] is not None, out["max_time"] is not None
    if has_metric != has_time:
        missing = "max_time" if has_metric else "time_metric"
        other = "time_metric" if has_metric else "max_time"
        raise ConfigError(f"searcher.{missing}", f"required together with searcher.{other}")
    if has_time and out["max_length"] is not None:
        raise ConfigError(
            "searcher.max_length", "cannot be combined with searcher.time_metric/max_time"
        )
    if not has_time and out["max_length"] is None and out["name"] == "adaptive_asha":
        # Determined 0.38: single, grid and random need no max_length (the script decides how
        # long it trains); ASHA needs it (or max_time) for its rungs.
        raise ConfigError(
            "searcher.max_length",
            "required for adaptive_asha (a mapping like {batches: N}) unless max_time is set",
        )
