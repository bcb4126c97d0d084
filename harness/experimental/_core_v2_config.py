"""core_v2's configs (Determined 0.38's `Config`, and the deprecated `DefaultConfig` and
`UnmanagedConfig`) and the unmanaged experiment's config made of them (pure)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class Config:
    """What an unmanaged run's experiment is made of (ignored on the cluster, where the
    experiment's own config applies). `searcher` defaults to single with metric `loss`.
    detlab has no workspaces, projects or external ids to attach: they are recorded in the
    experiment's description."""

    name: str | None = None
    hparams: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    description: str | None = None
    labels: list[str] | None = None
    workspace: str | None = None
    project: str | None = None
    checkpoint_storage: str | dict[str, Any] | None = None
    searcher: dict[str, Any] | None = None
    external_experiment_id: str | None = None
    external_trial_id: str | None = None


@dataclass
class DefaultConfig(Config):
    """Deprecated in 0.38 (use `Config`); same fields."""


@dataclass
class UnmanagedConfig(Config):
    """Deprecated in 0.38 (use `Config`); its workspace, project and external ids are merged
    into `defaults`."""

    extra: dict[str, Any] = field(default_factory=dict)


MERGED = ("workspace", "project", "external_experiment_id", "external_trial_id")


def merge_config(
    config: Config | None,
    defaults: Config | None,
    unmanaged: UnmanagedConfig | None,
    *,
    managed: bool,
) -> Config:
    """As Determined 0.38: `config` wins; else `defaults` with `unmanaged`'s ids filled in."""
    if defaults is not None or unmanaged is not None:
        warnings.warn(
            "'defaults' and 'unmanaged' parameters have been deprecated and will be removed in "
            "a future version. Please use `config` instead.",
            FutureWarning,
            stacklevel=3,
        )
    if config is not None:
        return config
    if defaults is None and not managed:
        if unmanaged is None:
            raise ValueError(
                "either specify `defaults` or `config`, or run as a managed determined experiment"
            )
        defaults = Config()
    merged = (
        Config(**{f.name: getattr(defaults, f.name) for f in fields(Config)})
        if defaults
        else Config()
    )
    if unmanaged is not None:
        for key in MERGED:
            if getattr(merged, key) is None:
                setattr(merged, key, getattr(unmanaged, key))
    return merged


def experiment_config(wanted: Config) -> dict[str, Any]:
    """The unmanaged experiment's config, in Determined's keys."""
    cfg: dict[str, Any] = {
        "name": wanted.name or "unmanaged",
        "unmanaged": True,
        "hyperparameters": {
            k: {"type": "const", "val": v} for k, v in (wanted.hparams or {}).items()
        },
        "searcher": wanted.searcher or {"name": "single", "metric": "loss"},
        "max_restarts": 0,
    }
    notes = [wanted.description] if wanted.description else []
    ids = {
        "workspace": wanted.workspace,
        "project": wanted.project,
        "external experiment": wanted.external_experiment_id,
        "external trial": wanted.external_trial_id,
    }
    notes += [f"{k}: {v}" for k, v in ids.items() if v]
    if notes:
        cfg["description"] = "; ".join(notes)
    if wanted.data is not None:
        cfg["data"] = wanted.data
    if wanted.labels:
        cfg["labels"] = list(wanted.labels)
    if (storage := storage_config(wanted.checkpoint_storage)) is not None:
        cfg["checkpoint_storage"] = storage
    return cfg


def storage_config(value: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """Determined's core_v2 takes a directory as `checkpoint_storage`: a shared_fs there."""
    if isinstance(value, str):
        return {"type": "shared_fs", "host_path": value}
    return value
