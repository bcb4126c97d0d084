"""The experiment config: one schema for the master and the `det` CLI (stdlib + PyYAML only)."""

from master.expconf._determined import warnings_for
from master.expconf._errors import ConfigError
from master.expconf._lengths import UNITS, length_unit, max_length_value
from master.expconf._schema import validate_experiment_config
from master.expconf._searcher import SEARCHERS
from master.expconf._yaml import load_yaml

__all__ = [
    "SEARCHERS",
    "UNITS",
    "ConfigError",
    "length_unit",
    "load_yaml",
    "max_length_value",
    "validate_experiment_config",
    "warnings_for",
]
