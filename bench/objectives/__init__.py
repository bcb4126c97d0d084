"""Objectives for the search-efficiency benchmark: multi-fidelity, resumable, minimised.

An objective hands out trials (`objective.trial(hparams, seed)`); a trial trains to a total
length (`trial.train_to(length)`, paying only the added length) and returns the validation
metric there. `space` is the detlab hyperparameter space (the experiment config's
`hyperparameters`), `max_length` the searcher's max_length in batches.

`expected_value(hparams)` is what a configuration is worth once the objective's noise is
averaged out, at max_length: the figure for the configuration a search recommends (its best
trial's), as opposed to the best single draw it happened to observe.
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

    def expected_value(self, hparams: dict[str, Any]) -> float:
        """The configuration's metric at max_length with the noise averaged out."""
