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
    trial_id: int | None = None,
) -> list[Mapping[str, Any]]:
    """The experiment's checkpoints (only trial `trial_id`'s, if given), best first by
    `sort_by` (default: its searcher metric)."""
    exp = client.get_experiment(exp_id)
    metric = sort_by or exp.get("searcher_metric") or "loss"
    if smaller_is_better is None:
        if sort_by is not None and sort_by != exp.get("searcher_metric"):
            raise ValueError(f"sorting by {sort_by!r} needs smaller_is_better (true or false)")
        smaller_is_better = bool(exp.get("smaller_is_better", True))
    if trial_id is None:
        ckpts = client.list_checkpoints(experiment_id=exp_id)
    else:
        ckpts = client.list_trial_checkpoints(trial_id)
    return rank(
        ckpts,
        validations_for(client, ckpts),
        metric,
        smaller_is_better,
        validated_only=validated_only,
        limit=limit,
    )


# Determined's CheckpointSortBy values that name a checkpoint attribute -> its field here.
ATTRIBUTES = {
    "SORT_BY_UUID": "uuid",
    "SORT_BY_TRIAL_ID": "trial_id",
    "SORT_BY_BATCH_NUMBER": "steps_completed",
    "SORT_BY_END_TIME": "reported_at",
    "SORT_BY_STATE": "state",
}


def trial_checkpoints(
    client: Client,
    exp_id: int,
    trial_id: int,
    *,
    metric: str | None = None,
    attribute: str | None = None,
    ascending: bool | None = None,
    limit: int | None = None,
) -> list[Mapping[str, Any]]:
    """A trial's checkpoints as Determined's GetTrialCheckpoints sorts them: by a checkpoint
    `attribute` (an ATTRIBUTES key), or by a validation `metric` at each checkpoint's step
    (default: the searcher metric, best first); `ascending` None means the metric's own order."""
    if attribute is not None and attribute in ATTRIBUTES:
        field = ATTRIBUTES[attribute]
        ckpts: list[Mapping[str, Any]] = list(client.list_trial_checkpoints(trial_id))
        present = [c for c in ckpts if c.get(field) is not None]
        present.sort(key=lambda c: c[field], reverse=ascending is False)
        out = present + [c for c in ckpts if c.get(field) is None]
        return out if limit is None else out[: max(limit, 0)]
    return ranked_checkpoints(
        client,
        exp_id,
        sort_by=metric,
        smaller_is_better=ascending,
        limit=limit,
        trial_id=trial_id,
    )
