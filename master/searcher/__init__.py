"""Searchers: pure state machines that decide which trials to run and how far."""

from __future__ import annotations

from detlab.expconf import SEARCHERS, ConfigError, ExperimentConfig
from master.searcher.asha import AdaptiveASHASearch
from master.searcher.base import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Resume,
    SearchMethod,
    Shutdown,
    Stop,
    ValidateAfter,
    operation_from_json,
    operation_to_json,
)
from master.searcher.grid import GridSearch
from master.searcher.random_search import RandomSearch
from master.searcher.single import SingleSearch

# name -> class.
SEARCH_METHODS: dict[str, type[SearchMethod]] = {
    SingleSearch.name: SingleSearch,
    GridSearch.name: GridSearch,
    RandomSearch.name: RandomSearch,
    AdaptiveASHASearch.name: AdaptiveASHASearch,
}


def make_searcher(config: ExperimentConfig, seed: int) -> SearchMethod:
    """The searcher for an experiment config."""
    name = config.searcher.name
    cls = SEARCH_METHODS.get(name)
    if cls is None:
        if name in SEARCHERS:
            raise ConfigError("searcher.name", f"searcher {name!r} is not supported yet")
        raise ConfigError(
            "searcher.name", f"unknown searcher {name!r}; expected one of {', '.join(SEARCHERS)}"
        )
    return cls(config, seed)


__all__ = [
    "SEARCH_METHODS",
    "AdaptiveASHASearch",
    "Close",
    "Create",
    "ExitedReason",
    "GridSearch",
    "Operation",
    "RandomSearch",
    "Resume",
    "SearchMethod",
    "Shutdown",
    "SingleSearch",
    "Stop",
    "ValidateAfter",
    "make_searcher",
    "operation_from_json",
    "operation_to_json",
]
