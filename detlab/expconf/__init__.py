"""The experiment config: one schema for the master and the `det` CLI (stdlib + PyYAML only)."""

from detlab.expconf import _limits as limits
from detlab.expconf._determined import warnings_for
from detlab.expconf._errors import ConfigError
from detlab.expconf._lengths import UNITS, length_unit, max_length_value
from detlab.expconf._schema import validate_experiment_config
from detlab.expconf._searcher import SEARCHERS
from detlab.expconf._yaml import load_yaml

__all__ = [
    "SEARCHERS",
    "UNITS",
    "ConfigError",
    "length_unit",
    "limits",
    "load_yaml",
    "max_length_value",
    "validate_experiment_config",
    "warnings_for",
]
