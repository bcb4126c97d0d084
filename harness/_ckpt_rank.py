"""Which checkpoints are best (pure): Determined's `det e lc --best N`, `det e download --top-n`
and the SDK's `list_checkpoints(sort_by=, order_by=)` rank checkpoints by the validation metric
their trial reported at the checkpoint's step.

detlab's checkpoint records do not carry validation metrics; the caller reads each trial's
validations and passes them in as `{(trial_id, steps_completed): metrics}`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Validations = Mapping[tuple[int, int], Mapping[str, Any]]


def validation_at(ckpt: Mapping[str, Any], validations: Validations) -> Mapping[str, Any] | None:
    """The metrics its trial validated at the checkpoint's step, if it did."""
    trial, steps = ckpt.get("trial_id"), ckpt.get("steps_completed")
    if trial is None or steps is None:
        return None
    return validations.get((int(trial), int(steps)))


def metric_of(ckpt: Mapping[str, Any], validations: Validations, metric: str) -> float | None:
    values = validation_at(ckpt, validations)
    value = values.get(metric) if values else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def rank(
    ckpts: Iterable[Mapping[str, Any]],
    validations: Validations,
    metric: str,
    smaller_is_better: bool,
    *,
    validated_only: bool = False,
    limit: int | None = None,
) -> list[Mapping[str, Any]]:
    """Best first by `metric`; checkpoints without it go last (newest first among them) or,
    with `validated_only`, are left out. Ties keep the newer checkpoint first."""
    scored: list[tuple[float, Mapping[str, Any]]] = []
    unscored: list[Mapping[str, Any]] = []
    for c in ckpts:
        value = metric_of(c, validations, metric)
        if value is None:
            unscored.append(c)
        else:
            scored.append((value if smaller_is_better else -value, c))
    newest = _newest_first
    scored.sort(key=lambda p: (p[0], newest(p[1])))
    out = [c for _, c in scored] + ([] if validated_only else sorted(unscored, key=newest))
    return out if limit is None else out[: max(limit, 0)]


def _newest_first(c: Mapping[str, Any]) -> tuple[int, int, str]:
    return (-int(c.get("steps_completed") or 0), -int(c.get("trial_id") or 0), str(c["uuid"]))


def by_trial_and_step(reports: Sequence[Mapping[str, Any]], trial_id: int) -> Validations:
    """`{(trial_id, steps_completed): metrics}` from a trial's validation reports."""
    return {(trial_id, int(r["steps_completed"])): dict(r.get("metrics") or {}) for r in reports}
