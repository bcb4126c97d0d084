"""`adaptive_asha`'s layout (pure, shared with the search preview and the web pages): brackets,
their trials and rung lengths, and how many trials each rung should see. The rules are in
`master.searcher.asha`'s docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass

from detlab.expconf import ConfigError, ExperimentConfig


def promote_quota(results: int, divisor: float) -> int:
    """floor(results / divisor): how many of a rung's results may be promoted."""
    return int(math.floor(results / divisor + 1e-9))


def _rungs_that_fit(value: int, divisor: float, limit: int) -> int:
    """The largest r in [1, limit] with divisor**(r-1) <= value.

    Stops at `limit`: with a divisor just above 1 the unbounded search would take billions of
    steps (the submit would hang the master).
    """
    r = 1
    while r < limit and divisor**r <= value * (1 + 1e-12):
        r += 1
    return r


def mode_brackets(mode: str, max_rungs: int) -> list[int]:
    """The rung counts of the brackets a mode runs (Determined's adaptive modes)."""
    if mode == "aggressive":
        return [max_rungs]
    if mode == "conservative":
        return list(range(1, max_rungs + 1))
    return list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))  # standard


def bracket_trials(max_trials: int, divisor: float, brackets: list[int]) -> list[int]:
    """max_trials split over brackets in proportion to divisor**(r-1)/r (summing to max_trials).

    Every bracket gets at least one trial while trials remain; the remainder goes to the first
    (most aggressive) bracket.
    """
    weights = [divisor ** (r - 1) / r for r in brackets]
    total = sum(weights)
    counts = [int(w / total * max_trials) for w in weights]
    remaining = max_trials - sum(counts)
    for i, count in enumerate(counts):
        if count == 0 and remaining > 0:
            counts[i] = 1
            remaining -= 1
    counts[0] += remaining
    return counts


def rung_lengths(max_length: int, divisor: float, num_rungs: int) -> list[int]:
    """The (strictly growing) lengths of a bracket's rungs, the last being max_length."""
    out: list[int] = []
    for k in range(num_rungs):
        length = max(int(max_length / divisor ** (num_rungs - 1 - k)), 1)
        if k == num_rungs - 1:
            length = max_length
        if not out or length > out[-1]:
            out.append(length)
    return out


@dataclass(frozen=True)
class Bracket:
    """One bracket: its rung lengths and how many trials start in it."""

    num_rungs: int
    trials: int
    lengths: tuple[int, ...]


def asha_layout(config: ExperimentConfig) -> list[Bracket]:
    """The brackets of an adaptive_asha config (brackets without trials are dropped)."""
    s = config.searcher
    divisor = s.divisor
    if s.max_trials is None:
        raise ConfigError("searcher.max_trials", "required")
    max_trials = s.max_trials
    max_length = s.max_length_value()
    brackets = list(s.bracket_rungs or ())
    if not brackets:
        max_rungs = min(
            _rungs_that_fit(max_length, divisor, s.max_rungs),
            _rungs_that_fit(max_trials, divisor, s.max_rungs),
        )
        brackets = mode_brackets(s.mode, max_rungs)
    brackets = sorted(brackets, reverse=True)  # most early stopping first
    counts = bracket_trials(max_trials, divisor, brackets)
    return [
        Bracket(r, n, tuple(rung_lengths(max_length, divisor, r)))
        for r, n in zip(brackets, counts, strict=True)
        if n > 0
    ]


def is_stopping(config: ExperimentConfig) -> bool:
    """Whether decisions are made once (stop_once, or the time_metric form)."""
    return config.searcher.stop_once or is_time_based(config)


def is_time_based(config: ExperimentConfig) -> bool:
    s = config.searcher
    return s.time_metric is not None and not s.max_length


def expected_rung_trials(trials: int, num_rungs: int, divisor: float, stopping: bool) -> list[int]:
    """How many trials reach each rung.

    Promotion form: exactly floor(n_k / divisor) once the bracket is done (without failures).
    Stopping form: the expectation for random metrics, sum over i of max(floor(i/d), 1)/i.
    """
    out = [trials]
    for _ in range(num_rungs - 1):
        n = out[-1]
        if stopping:
            nxt = round(sum(max(promote_quota(i, divisor), 1) / i for i in range(1, n + 1)))
        else:
            nxt = promote_quota(n, divisor)
        out.append(min(n, nxt))
    return out


def bracket_total_length(lengths: tuple[int, ...], reaching: list[int]) -> int:
    """Total training length of a bracket (trials resume, so each rung adds its increment)."""
    total, previous = 0, 0
    for length, n in zip(lengths, reaching, strict=True):
        total += n * (length - previous)
        previous = length
    return total
