"""The experiment config: one schema for the master and the `det` CLI (stdlib + PyYAML only),
and its typed form (`parse_experiment_config`, `load_stored`)."""

from detlab.expconf import _limits as limits
from detlab.expconf._determined import warnings_for
from detlab.expconf._errors import ConfigError
from detlab.expconf._lengths import UNITS
from detlab.expconf._schema import validate_experiment_config
from detlab.expconf._searcher import SEARCHERS
from detlab.expconf._template import validate_template
from detlab.expconf._typed import (
    BindMount,
    CheckpointStorageConfig,
    EnvironmentConfig,
    ExperimentConfig,
    Length,
    ReproducibilityConfig,
    ResourcesConfig,
    SearcherConfig,
    length_unit,
    load_stored,
    max_length_value,
    parse_experiment_config,
)
from detlab.expconf._yaml import load_yaml

__all__ = [
    "SEARCHERS",
    "UNITS",
    "BindMount",
    "CheckpointStorageConfig",
    "ConfigError",
    "EnvironmentConfig",
    "ExperimentConfig",
    "Length",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "SearcherConfig",
    "length_unit",
    "limits",
    "load_stored",
    "load_yaml",
    "max_length_value",
    "parse_experiment_config",
    "validate_experiment_config",
    "validate_template",
    "warnings_for",
]
