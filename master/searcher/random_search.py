"""`random`: max_trials trials with sampled hyperparameters, each trained to max_length."""

from __future__ import annotations

from detlab.expconf import ExperimentConfig
from master.searcher._common import IndependentSearch


class RandomSearch(IndependentSearch):
    """`max_trials` trials, at most `max_concurrent_trials` (0: no limit) running at a time.

    Each trial validates once at max_length and is closed. An INVALID_HP trial is replaced by
    a fresh one (it does not count towards max_trials); an ERRORED or canceled trial counts as
    done without a result. Shutdown once max_trials trials are done.
    """

    name = "random"
    replace_invalid = True

    def __init__(self, config: ExperimentConfig, seed: int) -> None:
        super().__init__(config, seed)
        assert config.searcher.max_trials is not None  # the schema requires it for random
        self._total = config.searcher.max_trials

    @property
    def total(self) -> int:
        return self._total
