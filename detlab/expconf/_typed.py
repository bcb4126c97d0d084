"""The experiment config, typed: frozen dataclasses over the schema's canonical JSON.

The schema (`_schema.validate_experiment_config`) is the one place that checks a user's config
and fills every default; `ExperimentConfig.from_json` only gives that canonical JSON types, so
no default is restated here (a missing key is an error, not a guess). `to_json` gives back the
canonical JSON exactly (same keys, same order), which is what the master stores and shows.

Why dataclasses and not pydantic: the schema's error messages (path + message, suggestions for
typos, Determined's forms) are what users see and are tested word for word; a model library
would either replace them or sit beside them as a second schema. Stdlib keeps `detlab/` (and
the `det` CLI's local check) free of dependencies beyond PyYAML.

Free-form sections (hyperparameters, data, environment ports, ...) stay JSON values: treat them
as read-only; a change is a new config through `dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from detlab.expconf._errors import ConfigError
from detlab.expconf._schema import validate_experiment_config


@dataclass(frozen=True)
class Length:
    """A training length, `{unit: value}` in JSON (unit: batches | records | epochs)."""

    unit: str
    value: int

    @classmethod
    def from_json(cls, raw: Mapping[str, int]) -> Length:
        ((unit, value),) = raw.items()
        return cls(unit, int(value))

    def to_json(self) -> dict[str, int]:
        return {self.unit: self.value}


class _Json:
    """From and to the canonical JSON, field by field, following the type hints."""

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Self:
        hints = _hints(typing.cast(Any, cls))
        fields = dataclasses.fields(typing.cast(Any, cls))
        return cls(**{f.name: _from(hints[f.name], raw[f.name]) for f in fields})

    def to_json(self) -> dict[str, Any]:
        fields = dataclasses.fields(typing.cast(Any, self))
        return {f.name: _to(getattr(self, f.name)) for f in fields}


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _from(hint: Any, value: Any) -> Any:
    """One JSON value as the type `hint` names (dataclasses, tuples, optionals; else as is)."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _from(inner[0], value) if len(inner) == 1 else value
    if origin is tuple:
        (item, _) = typing.get_args(hint)
        return tuple(_from(item, v) for v in value)
    if isinstance(hint, type) and hasattr(hint, "from_json"):
        return hint.from_json(value)
    return value


def _to(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple):
        return [_to(v) for v in value]
    return value


@dataclass(frozen=True)
class SearcherConfig(_Json):
    name: str
    metric: str
    smaller_is_better: bool
    max_length: Length | None
    max_trials: int | None
    max_concurrent_trials: int
    mode: str
    divisor: float
    max_rungs: int
    sampler: str
    bracket_rungs: tuple[int, ...] | None
    stop_once: bool
    time_metric: str | None
    max_time: int | None
    source_trial_id: int | None
    source_checkpoint_uuid: str | None

    @property
    def unit(self) -> str:
        """The unit of the searcher's lengths; searches driven by time_metric/max_time (and
        those without a max_length) count in batches."""
        return self.max_length.unit if self.max_length else "batches"

    def max_length_value(self) -> int:
        """How far one trial trains at most, in `unit` (`max_time` for time-based searches).

        Without max_length or max_time (allowed for single, grid and random), the searcher's
        operations ask for DEFAULT_OPERATION_LENGTH batches.
        """
        if self.max_length:
            return self.max_length.value
        if self.max_time is not None:
            return self.max_time
        if self.name in ("single", "grid", "random"):
            return DEFAULT_OPERATION_LENGTH
        raise ConfigError("searcher.max_length", "required")


# The length a searcher operation asks for when the config names no max_length (single, grid
# and random in Determined 0.38 style, where the script decides how long it trains). Scripts
# that still iterate `core.searcher.operations()` train this many batches.
DEFAULT_OPERATION_LENGTH = 100


@dataclass(frozen=True)
class ResourcesConfig(_Json):
    slots_per_trial: int
    resource_pool: str
    priority: int
    weight: float
    max_slots: int | None
    shm_size: int | str | None
    devices: tuple[Any, ...]
    is_single_node: bool


@dataclass(frozen=True)
class CheckpointStorageConfig(_Json):
    """Every storage key is present; those of other types are None."""

    type: str
    host_path: str | None
    storage_path: str | None
    propagation: str | None
    bucket: str | None
    prefix: str | None
    access_key: str | None
    secret_key: str | None
    endpoint_url: str | None
    save_experiment_best: int
    save_trial_best: int
    save_trial_latest: int


@dataclass(frozen=True)
class EnvironmentConfig(_Json):
    image: str | dict[str, str] | None  # per device: the agent picks by its slots
    environment_variables: dict[str, str]
    force_pull_image: bool
    ports: dict[str, Any]
    registry_auth: dict[str, Any] | None
    add_capabilities: tuple[str, ...]
    drop_capabilities: tuple[str, ...]
    pod_spec: dict[str, Any] | None


@dataclass(frozen=True)
class BindMount(_Json):
    host_path: str
    container_path: str
    read_only: bool
    propagation: str


@dataclass(frozen=True)
class ReproducibilityConfig(_Json):
    experiment_seed: int | None


@dataclass(frozen=True)
class SlurmSection(_Json):
    """Determined's `slurm:` section (detlab/expconf/_slurm.py); applied on Slurm pools only."""

    slots_per_node: int | None
    gpu_type: str | None
    sbatch_args: tuple[str, ...]


@dataclass(frozen=True)
class ExperimentConfig(_Json):
    """A validated, expanded experiment config (`parse_experiment_config`, `load_stored`)."""

    name: str
    description: str
    entrypoint: str
    hyperparameters: dict[str, Any]
    searcher: SearcherConfig
    resources: ResourcesConfig
    checkpoint_storage: CheckpointStorageConfig
    min_validation_period: Length | None
    min_checkpoint_period: Length | None
    records_per_epoch: int | None
    max_restarts: int
    environment: EnvironmentConfig
    bind_mounts: tuple[BindMount, ...]
    reproducibility: ReproducibilityConfig
    labels: tuple[str, ...]
    data: dict[str, Any]
    workspace: str | None
    project: str | None
    profiling: dict[str, Any]
    optimizations: dict[str, Any]
    scheduling_unit: int
    perform_initial_validation: bool
    checkpoint_policy: str
    debug: bool
    integrations: dict[str, Any]
    log_policies: list[Any]
    unmanaged: bool
    slurm: SlurmSection

    def replace(self, **changes: Any) -> ExperimentConfig:
        """A copy with `changes` (sections are replaced whole: `resources=conf.resources...`)."""
        return dataclasses.replace(self, **changes)


def parse_experiment_config(raw: Any, defaults: dict | None = None) -> ExperimentConfig:
    """Validate a user's config (parsed YAML) once and type it; errors are the schema's."""
    return ExperimentConfig.from_json(validate_experiment_config(raw, defaults))


def load_stored(stored: Mapping[str, Any]) -> ExperimentConfig:
    """A config as the master stored it (canonical JSON). One stored before a key existed is
    expanded by the schema again, so the schema's default fills it here too."""
    try:
        return ExperimentConfig.from_json(stored)
    except KeyError:
        return parse_experiment_config(stored)


def length_unit(config: Mapping[str, Any]) -> str:
    """`SearcherConfig.unit` of an expanded config's JSON."""
    return SearcherConfig.from_json(config["searcher"]).unit


def max_length_value(config: Mapping[str, Any]) -> int:
    """`SearcherConfig.max_length_value` of an expanded config's JSON."""
    return SearcherConfig.from_json(config["searcher"]).max_length_value()
