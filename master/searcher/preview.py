"""`det experiment preview-search`: what a searcher config will run, computed in closed form.

Nothing is simulated. For adaptive_asha in its promotion form the rung counts are exact for a
search without failures (rung k+1 gets floor(n_k / divisor) trials); in the stopping forms
(`stop_once`, `time_metric`/`max_time`) they are the expectation for random metrics.
"""

from __future__ import annotations

from typing import Any

from detlab.expconf import ExperimentConfig
from master.searcher.asha_layout import (
    asha_layout,
    bracket_total_length,
    expected_rung_trials,
    is_stopping,
    is_time_based,
)
from master.searcher.grid import grid_trials
from master.searcher.hparams import grid_size


def preview(config: ExperimentConfig) -> dict[str, Any]:
    """A summary of the search: trials, total training length and (ASHA) rungs per bracket.

    `{"searcher", "trials", "total_length", "unit", "rungs": [{"length", "trials"}], ...}` with
    `grid_size` for grid, and `brackets` (each with its own rungs) for ASHA with several
    brackets. `rungs` lists, per distinct length, how many trials train to it.
    """
    s = config.searcher
    name = s.name
    max_length = s.max_length_value()
    out: dict[str, Any] = {"searcher": name, "unit": s.unit}
    if is_time_based(config):
        out["time_metric"] = s.time_metric
    if name == "adaptive_asha":
        divisor = s.divisor
        stopping = is_stopping(config)
        brackets = []
        per_length: dict[int, int] = {}
        total = 0
        for bracket in asha_layout(config):
            reaching = expected_rung_trials(bracket.trials, len(bracket.lengths), divisor, stopping)
            rungs = [
                {"length": length, "trials": n}
                for length, n in zip(bracket.lengths, reaching, strict=True)
            ]
            for rung in rungs:
                per_length[rung["length"]] = per_length.get(rung["length"], 0) + rung["trials"]
            total += bracket_total_length(bracket.lengths, reaching)
            brackets.append(
                {"num_rungs": len(bracket.lengths), "trials": bracket.trials, "rungs": rungs}
            )
        out["trials"] = sum(b["trials"] for b in brackets)
        out["total_length"] = total
        out["rungs"] = [{"length": n, "trials": per_length[n]} for n in sorted(per_length)]
        if len(brackets) > 1:
            out["brackets"] = brackets
        return out
    if name == "grid":
        trials = grid_trials(config)
        out["grid_size"] = grid_size(config.hyperparameters)
    elif name == "random" and s.max_trials is not None:
        trials = s.max_trials
    else:
        trials = 1
    out["trials"] = trials
    out["total_length"] = trials * max_length
    out["rungs"] = [{"length": max_length, "trials": trials}]
    return out
