"""Objectives for the search-efficiency benchmark: multi-fidelity, resumable, minimised.

An objective hands out trials (`objective.trial(hparams, seed)`); a trial trains to a total
length (`trial.train_to(length)`, paying only the added length) and returns the validation
metric there. `space` is the detlab hyperparameter space (the experiment config's
`hyperparameters`), `max_length` the searcher's max_length in batches.
"""

from __future__ import annotations

from typing import Any, Protocol


class Trial(Protocol):
    def train_to(self, length: int) -> float:
        """Train until the total length is `length` (never backwards); the metric there."""


class Objective(Protocol):
    name: str
    space: dict[str, Any]  # detlab `hyperparameters`
    max_length: int  # batches
    optimum: float | None  # the known global minimum, when there is one

    def trial(self, hparams: dict[str, Any], seed: int) -> Trial: ...
