"""Reads what `harness._ckpt_rank` ranks: an experiment's checkpoints and its trials'
validations (for the SDK's `Experiment.list_checkpoints` and `det e lc --best`/`download`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness._ckpt_rank import Validations, by_trial_and_step, rank, validation_at
from harness.api.client import Client


def validations_for(client: Client, ckpts: Sequence[Mapping[str, Any]]) -> Validations:
    """`{(trial_id, steps): metrics}` of every trial that holds one of `ckpts`."""
    out: dict[tuple[int, int], Mapping[str, Any]] = {}
    for trial_id in sorted({int(c["trial_id"]) for c in ckpts if c.get("trial_id") is not None}):
        reports = client.trial_metrics(trial_id, group="validation", limit=10_000)
        out.update(by_trial_and_step(reports, trial_id))
    return out


def validation_metrics(
    client: Client, ckpts: Sequence[Mapping[str, Any]]
) -> dict[str, Mapping[str, Any] | None]:
    """Each checkpoint's validation metrics (at its step), by uuid."""
    validations = validations_for(client, ckpts)
    return {str(c["uuid"]): validation_at(c, validations) for c in ckpts}


def ranked_checkpoints(
    client: Client,
    exp_id: int,
    *,
    sort_by: str | None = None,
    smaller_is_better: bool | None = None,
    limit: int | None = None,
    validated_only: bool = False,
) -> list[Mapping[str, Any]]:
    """The experiment's checkpoints, best first by `sort_by` (default: its searcher metric)."""
    exp = client.get_experiment(exp_id)
    metric = sort_by or exp.get("searcher_metric") or "loss"
    if smaller_is_better is None:
        if sort_by is not None and sort_by != exp.get("searcher_metric"):
            raise ValueError(f"sorting by {sort_by!r} needs smaller_is_better (true or false)")
        smaller_is_better = bool(exp.get("smaller_is_better", True))
    ckpts = client.list_checkpoints(experiment_id=exp_id)
    return rank(
        ckpts,
        validations_for(client, ckpts),
        metric,
        smaller_is_better,
        validated_only=validated_only,
        limit=limit,
    )
