"""`grid`: one trial per point of the hyperparameter grid, each trained to max_length."""

from __future__ import annotations

from typing import Any

from detlab.expconf import ExperimentConfig
from master.searcher._common import IndependentSearch
from master.searcher.hparams import grid_point, grid_size


def grid_trials(config: ExperimentConfig) -> int:
    """How many trials a grid search runs: the grid's size, capped by max_trials if set."""
    size = grid_size(config.hyperparameters)
    cap = config.searcher.max_trials
    return min(size, cap) if cap else size


class GridSearch(IndependentSearch):
    """Every grid point (in `hparams.grid_point` order), `max_concurrent_trials` at a time (0: all).

    Each trial validates once at max_length and is closed. An INVALID_HP point is not
    replaced (there is nothing else to try in its place); it counts as done.
    """

    name = "grid"
    replace_invalid = False

    def __init__(self, config: ExperimentConfig, seed: int) -> None:
        super().__init__(config, seed)
        self._total = grid_trials(config)

    @property
    def total(self) -> int:
        return self._total

    def _next_hparams(self) -> dict[str, Any]:
        # Computed per trial: the grid is never materialised (10**9 points would not fit).
        return grid_point(self.config.hyperparameters, self.issued)
