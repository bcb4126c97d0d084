"""Pure helpers for the pages: query-string parsing, numbers, durations, URLs (no I/O)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from werkzeug.datastructures import MultiDict

from master.errors import BadRequest
from master.services.experiment.experiment_list import SORT_KEYS, ExperimentQuery, check_states

PER_PAGE = 50
MAX_PER_PAGE = 500


def _int(args: MultiDict, name: str, default: int, lo: int, hi: int) -> int:
    from master.api._util import int_arg

    return int_arg(name, default, lo, hi, args=args)


def split_list(args: MultiDict, name: str) -> list[str]:
    """`?x=a&x=b` and `?x=a,b` alike."""
    out: list[str] = []
    for raw in args.getlist(name):
        out.extend(p.strip() for p in raw.split(",") if p.strip())
    return out


def experiment_query(args: MultiDict) -> tuple[ExperimentQuery, int, int]:
    """The experiments page's filters from its query string: (query, page, per_page)."""
    per_page = _int(args, "per_page", PER_PAGE, 1, MAX_PER_PAGE)
    page = _int(args, "page", 1, 1, 10**9)
    sort = args.get("sort") or "id"
    if sort not in SORT_KEYS:
        raise BadRequest(
            f"unknown sort key {sort!r}; expected one of {', '.join(SORT_KEYS)}", path="sort"
        )
    order = args.get("order") or "desc"
    if order not in ("asc", "desc"):
        raise BadRequest("order must be 'asc' or 'desc'", path="order")
    q = ExperimentQuery(
        states=check_states(split_list(args, "state")),
        owner=(args.get("owner") or "").strip() or None,
        name=(args.get("q") or "").strip() or None,
        sort=sort,
        descending=order == "desc",
        limit=per_page,
        offset=(page - 1) * per_page,
    )
    return q, page, per_page


def int_list(args: MultiDict, name: str) -> list[int]:
    out: list[int] = []
    for raw in split_list(args, name):
        try:
            out.append(int(raw))
        except ValueError:
            raise BadRequest(f"{name} must be integers, got {raw!r}", path=name) from None
    return list(dict.fromkeys(out))


def with_args(base: str, args: MultiDict | dict, **changes: Any) -> str:
    """`base` with the current query string, some keys replaced (None drops a key)."""
    items: list[tuple[str, str]] = []
    keys = set(changes)
    pairs = args.items(multi=True) if isinstance(args, MultiDict) else args.items()
    for k, v in pairs:
        if k not in keys and v not in (None, ""):
            items.append((k, str(v)))
    for k, v in changes.items():
        if v is not None and v != "":
            items.append((k, str(v)))
    return base + ("?" + urlencode(items) if items else "")


def metric(value: Any) -> str:
    """A metric for a table cell: 4 significant digits, '-' when absent."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def as_utc(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def duration(start: datetime | None, end: datetime | None, now: datetime) -> str:
    """'3h 05m', '4m 10s', '12s'; from start to end (or now while running)."""
    start = as_utc(start)
    if start is None:
        return "–"
    secs = max(0, int(((as_utc(end) or now) - start).total_seconds()))
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    if d:
        return f"{d}d {h:02d}h"
    if h:
        return f"{h}h {m:02d}m"
    if m:
        return f"{m}m {s:02d}s"
    return f"{s}s"


def utc_text(dt: datetime | None) -> str:
    """The fallback shown without JavaScript (the script rewrites it in the viewer's locale)."""
    dt = as_utc(dt)
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if dt else "–"


def hparam_text(value: Any) -> str:
    if isinstance(value, float):
        return metric(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={hparam_text(v)}" for k, v in value.items())
    return str(value)


def flat_hparams(hparams: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested hyperparameters as dotted names: {"opt": {"lr": 1}} -> {"opt.lr": 1}."""
    out: dict[str, Any] = {}
    for k, v in hparams.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat_hparams(v, name + "."))
        else:
            out[name] = v
    return out


def differing_rows(rows: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Only the rows whose values are not all equal ("only show differences")."""
    return {k: v for k, v in rows.items() if len({repr(x) for x in v}) > 1}


def hparam_types(space: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Each hyperparameter of an experiment's config by dotted name -> its type (`const`,
    `int`, `double`, `log`, `categorical`); a bare value is a constant."""
    out: dict[str, str] = {}
    for k, v in space.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v.get("type") == "object" and isinstance(v.get("vals"), dict):
            out.update(hparam_types(v["vals"], name + "."))  # a group, as the master stores it
        elif isinstance(v, dict) and isinstance(v.get("type"), str):
            out[name] = v["type"]
        elif isinstance(v, dict):
            out.update(hparam_types(v, name + "."))
        else:
            out[name] = "const"
    return out


def scatter_axes(space: dict[str, Any], trial_hparams: list[dict[str, Any]]) -> list[dict]:
    """The hyperparameters worth a scatter against the metric, in name order: not constants
    (declared `const`, or one value in every trial), each with `log: true` when it is sampled
    on a log scale (`type: log`) so its axis is logarithmic too."""
    types = hparam_types(space)
    names = sorted({k for h in trial_hparams for k in h})
    axes = []
    for name in names:
        values = {repr(h.get(name)) for h in trial_hparams}
        if types.get(name) == "const" or len(values) < 2:
            continue
        axes.append({"name": name, "log": types.get(name) == "log"})
    return axes
