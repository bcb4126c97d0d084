"""The experiment config schema: validate a user's YAML and expand every default.

Pure (stdlib + PyYAML) so the master and the `det` CLI share exactly one definition.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping
from typing import Any

from detlab.expconf._check import (
    REQUIRED,
    describe,
    get_bool,
    get_int,
    get_json,
    get_str,
    get_str_list,
    item,
    mapping,
)
from detlab.expconf._determined import strip_unhonoured
from detlab.expconf._errors import ConfigError
from detlab.expconf._hparams import check_grid, normalize_hyperparameters
from detlab.expconf._lengths import parse_length
from detlab.expconf._limits import (
    MAX_DESCRIPTION,
    MAX_LABEL,
    MAX_LABELS,
    MAX_LENGTH,
    MAX_NAME,
    MAX_RECORDS_PER_EPOCH,
    MAX_RESTARTS,
    MAX_SHORT,
    check_document,
)
from detlab.expconf._searcher import parse_searcher
from detlab.expconf._sections import (
    merge_storage,
    parse_bind_mounts,
    parse_checkpoint_storage,
    parse_environment,
    parse_reproducibility,
    parse_resources,
)
from detlab.expconf._slurm import parse_slurm_section

TOP_LEVEL_KEYS = (
    "name",
    "description",
    "entrypoint",
    "hyperparameters",
    "searcher",
    "resources",
    "checkpoint_storage",
    "min_validation_period",
    "min_checkpoint_period",
    "records_per_epoch",
    "max_restarts",
    "environment",
    "bind_mounts",
    "reproducibility",
    "labels",
    "data",
    "workspace",
    "project",
    "profiling",
    "optimizations",
    "scheduling_unit",
    "perform_initial_validation",
    "checkpoint_policy",
    "debug",
    "integrations",
    "log_policies",
    "unmanaged",
    "slurm",
)
DEFAULT_NAME = "Experiment"
# Sections a user's value replaces wholesale instead of merging over the master's defaults.
_OPAQUE = ("hyperparameters", "data")
DEFAULT_MAX_RESTARTS = 5


def validate_experiment_config(raw: Any, defaults: dict | None = None) -> dict:
    """Validate `raw` (parsed YAML) and return the expanded, JSON-serialisable config.

    `defaults` (from the master config) are merged under the user's values. Without
    defaults (the CLI's local check) a shared_fs storage may lack `host_path`: the master
    supplies it; with defaults it is required.
    """
    if raw is None:
        raise ConfigError("the experiment config is empty")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"expected a mapping at the top level, got {describe(raw)}")
    check_document(raw)
    # Determined 0.38 keys detlab does not act on are accepted (`warnings_for` names them).
    user = mapping(strip_unhonoured(raw), "", TOP_LEVEL_KEYS)
    merged = _merge(user, defaults) if defaults else user
    return _expand(merged, require_storage=defaults is not None)


def _merge(user: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults under the user's values; nested mappings merge, everything else is replaced."""
    out = copy.deepcopy(dict(defaults))
    for key, value in user.items():
        if key == "checkpoint_storage":
            out[key] = merge_storage(value, defaults.get(key))
        elif (
            isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and key not in _OPAQUE
        ):
            out[key] = _merge(dict(value), out[key])
        elif value is not None or key not in out:
            out[key] = value
    return out


def _expand(fields: dict[str, Any], *, require_storage: bool) -> dict[str, Any]:
    searcher = parse_searcher(fields.get("searcher"))
    hparams = normalize_hyperparameters(fields.get("hyperparameters"))
    if searcher["name"] == "grid":
        check_grid(hparams)
    resources = parse_resources(fields.get("resources"))
    unmanaged = get_bool(fields, "unmanaged", "", False)
    config: dict[str, Any] = {
        "name": get_str(fields, "name", "", DEFAULT_NAME, max_len=MAX_NAME),
        "description": get_str(
            fields, "description", "", "", allow_empty=True, max_len=MAX_DESCRIPTION
        ),
        "entrypoint": _entrypoint(fields.get("entrypoint"), unmanaged),
        "hyperparameters": hparams,
        "searcher": searcher,
        "resources": resources,
        "checkpoint_storage": parse_checkpoint_storage(
            fields.get("checkpoint_storage"), require_location=require_storage
        ),
        "min_validation_period": parse_length(fields, "min_validation_period", "", minimum=0),
        "min_checkpoint_period": parse_length(fields, "min_checkpoint_period", "", minimum=0),
        "records_per_epoch": get_int(
            fields, "records_per_epoch", "", None, minimum=1, limit=MAX_RECORDS_PER_EPOCH
        ),
        "max_restarts": get_int(
            fields, "max_restarts", "", DEFAULT_MAX_RESTARTS, minimum=0, limit=MAX_RESTARTS
        ),
        "environment": parse_environment(fields.get("environment")),
        "bind_mounts": parse_bind_mounts(fields.get("bind_mounts")),
        "reproducibility": parse_reproducibility(fields.get("reproducibility")),
        "labels": get_str_list(fields, "labels", "", [], max_len=MAX_LABEL, max_items=MAX_LABELS),
        "data": get_json(fields, "data", "", {}, kind=dict),
        "workspace": get_str(fields, "workspace", "", None, max_len=MAX_SHORT),
        "project": get_str(fields, "project", "", None, max_len=MAX_SHORT),
        "profiling": get_json(fields, "profiling", "", {"enabled": False}, kind=dict),
        "optimizations": get_json(fields, "optimizations", "", {}, kind=dict),
        "scheduling_unit": get_int(fields, "scheduling_unit", "", 100, minimum=1, limit=MAX_LENGTH),
        "perform_initial_validation": get_bool(fields, "perform_initial_validation", "", False),
        "checkpoint_policy": get_str(
            fields, "checkpoint_policy", "", "best", choices=("best", "all", "none")
        ),
        "debug": get_bool(fields, "debug", "", False),
        "integrations": get_json(fields, "integrations", "", {}, kind=dict),
        "log_policies": get_json(fields, "log_policies", "", [], kind=list),
        # Determined's unmanaged runs: the script runs wherever its user started it and reports
        # to the master (harness.experimental.core_v2); the master never schedules it.
        "unmanaged": unmanaged,
        # Honoured on a Slurm pool (master/rm/slurm_cli.py), a warning elsewhere.
        "slurm": parse_slurm_section(fields.get("slurm")),
    }
    _check_epochs(config)
    return config


def _entrypoint(value: Any, unmanaged: bool = False) -> str:
    """A shell command or `module:TrialClass`; Determined's argv-list form is joined. An
    unmanaged experiment's script is started by its user, so it needs none."""
    if value is None and unmanaged:
        return ""
    if value is None:
        raise ConfigError("entrypoint", "required (a command like 'python3 train.py')")
    if isinstance(value, list):
        if not value:
            raise ConfigError("entrypoint", "must not be empty")
        for i, arg in enumerate(value):
            if not isinstance(arg, str):
                raise ConfigError(item("entrypoint", i), f"expected a string, got {describe(arg)}")
        return shlex.join(value)
    return get_str({"entrypoint": value}, "entrypoint", "", REQUIRED)


def _check_epochs(config: dict[str, Any]) -> None:
    """Epoch lengths need records_per_epoch to be converted into records, which must fit."""
    per_epoch = config["records_per_epoch"]
    for where, length in (
        ("searcher.max_length", config["searcher"]["max_length"]),
        ("min_validation_period", config["min_validation_period"]),
        ("min_checkpoint_period", config["min_checkpoint_period"]),
    ):
        if not length or "epochs" not in length:
            continue
        if per_epoch is None:
            raise ConfigError("records_per_epoch", f"required because {where} is in epochs")
        if length["epochs"] * per_epoch > MAX_LENGTH:
            raise ConfigError(
                f"{where}.epochs",
                f"{length['epochs']:,} epochs of {per_epoch:,} records exceed "
                f"{MAX_LENGTH:,} records",
            )
