"""What the experiment page says about its searcher (pure: config + stored searcher state)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from detlab.expconf import ExperimentConfig


@dataclass(frozen=True)
class RungView:
    length: int
    results: int
    promoted: int
    best: float | None


@dataclass(frozen=True)
class BracketView:
    index: int
    trials: int  # how many trials the bracket starts
    rungs: list[RungView]


def _metric(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def asha_brackets(config: ExperimentConfig, searcher_state: dict | None) -> list[BracketView]:
    """Adaptive ASHA's brackets with, per rung, its length, results, promotions and best metric.

    An experiment whose config cannot be laid out (or another searcher) gives [].
    """
    if config.searcher.name != "adaptive_asha":
        return []
    from master.searcher.asha_layout import asha_layout

    try:
        layout = asha_layout(config)
    except (KeyError, TypeError, ValueError):
        return []
    smaller = config.searcher.smaller_is_better
    rungs_state: list = []
    if searcher_state and isinstance(searcher_state.get("state"), dict):
        rungs_state = searcher_state["state"].get("rungs") or []
    out = []
    for b, bracket in enumerate(layout):
        entries = rungs_state[b] if b < len(rungs_state) else []
        rungs = []
        for k, length in enumerate(bracket.lengths):
            rung = entries[k] if k < len(entries) else []
            values = [m for m in (_metric(e[1]) for e in rung if not e[2]) if m is not None]
            best = (min(values) if smaller else max(values)) if values else None
            promoted = sum(1 for e in rung if e[3])
            rungs.append(RungView(int(length), len(rung), promoted, best))
        out.append(BracketView(b + 1, bracket.trials, rungs))
    return out


def searcher_summary(config: ExperimentConfig) -> list[tuple[str, str]]:
    """The searcher's settings worth showing, as (label, value) pairs."""
    s = config.searcher
    out = [("Searcher", s.name)]
    if s.metric:
        better = "smaller" if s.smaller_is_better else "larger"
        out.append(("Metric", f"{s.metric} ({better} is better)"))
    if s.max_length:
        out.append(("Max length", f"{s.max_length.value} {s.max_length.unit}"))
    name = s.name
    shown = {
        "single": (),
        "grid": ("max_concurrent_trials",),
        "random": ("max_trials", "max_concurrent_trials"),
    }.get(
        str(name),
        (
            "max_trials",
            "max_concurrent_trials",
            "mode",
            "divisor",
            "max_rungs",
            "time_metric",
            "sampler",
        ),
    )
    labels = {
        "max_trials": "Max trials",
        "max_concurrent_trials": "Max concurrent",
        "mode": "Mode",
        "divisor": "Divisor",
        "max_rungs": "Max rungs",
        "time_metric": "Time metric",
        "sampler": "Sampler",
    }
    for key in shown:
        value = getattr(s, key)
        if value not in (None, ""):
            out.append((labels[key], str(value)))
    return out
