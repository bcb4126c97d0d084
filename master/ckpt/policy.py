"""Which checkpoints a garbage-collection policy keeps: pure, no I/O.

Determined's rule: keep the union of
- the `save_experiment_best` best checkpoints with a validation over the whole experiment,
- the `save_trial_best` best checkpoints with a validation of each trial,
- the `save_trial_latest` latest checkpoints of each trial (with or without a validation),
where "best" is the searcher metric of the validation taken at the checkpoint's step (a
checkpoint without one is never "best", only possibly "latest"). Beyond Determined: checkpoints
marked `protected` (registered in the model registry, or the one a trial would resume from) are
always kept, and the rule may be applied while trials still run.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Policy:
    save_experiment_best: int = 0
    save_trial_best: int = 1
    save_trial_latest: int = 1

    @classmethod
    def from_storage(cls, storage: Mapping[str, Any] | None) -> Policy:
        """The policy in a `checkpoint_storage` config (Determined's defaults 0/1/1)."""
        s = storage or {}

        def n(key: str, default: int) -> int:
            value = s.get(key)
            return default if value is None else int(value)

        return cls(n("save_experiment_best", 0), n("save_trial_best", 1), n("save_trial_latest", 1))

    def to_json(self) -> dict[str, int]:
        return {
            "save_experiment_best": self.save_experiment_best,
            "save_trial_best": self.save_trial_best,
            "save_trial_latest": self.save_trial_latest,
        }


class Candidate(NamedTuple):
    """One live checkpoint. `order` sorts by age (larger = newer); `metric` is the searcher
    metric of the validation at its step, or None. (A tuple: 10,000 are built per plan.)"""

    uuid: str
    trial_id: int
    order: float
    metric: float | None = None
    protected: bool = False
    size: int = 0


@dataclass(frozen=True)
class Plan:
    keep: dict[str, list[str]]  # uuid -> why it is kept
    delete: list[str]  # uuids, oldest first
    bytes_freed: int = 0
    why: dict[str, Any] = field(default_factory=dict)


def _has_metric(c: Candidate) -> bool:
    return c.metric is not None and not math.isnan(c.metric)


def plan(candidates: Iterable[Candidate], policy: Policy, smaller_is_better: bool = True) -> Plan:
    """Split `candidates` into kept (with the reasons) and deleted."""
    cands = list(candidates)
    sign = 1.0 if smaller_is_better else -1.0
    # (rank key, candidate): by metric, ties to the newer one; only checkpoints with a metric.
    scored = [
        ((sign * c.metric, -c.order, c.uuid), c)  # type: ignore[operator]
        for c in cands
        if _has_metric(c)
    ]

    def first(n: int, items: list[tuple[Any, Candidate]]) -> list[Candidate]:
        return [c for _k, c in heapq.nsmallest(n, items, key=lambda kc: kc[0])]

    keep: dict[str, list[str]] = defaultdict(list)
    if policy.save_experiment_best > 0:
        for c in first(policy.save_experiment_best, scored):
            keep[c.uuid].append("experiment best")
    if policy.save_trial_best > 0:
        scored_by_trial: dict[int, list[tuple[Any, Candidate]]] = defaultdict(list)
        for item in scored:
            scored_by_trial[item[1].trial_id].append(item)
        for items in scored_by_trial.values():
            for c in first(policy.save_trial_best, items):
                keep[c.uuid].append("trial best")
    if policy.save_trial_latest > 0:
        by_trial: dict[int, list[tuple[Any, Candidate]]] = defaultdict(list)
        for c in cands:
            by_trial[c.trial_id].append(((-c.order, c.uuid), c))
        for items in by_trial.values():
            for c in first(policy.save_trial_latest, items):
                keep[c.uuid].append("trial latest")
    for c in cands:
        if c.protected:
            keep[c.uuid].append("protected")
    doomed = sorted((c for c in cands if c.uuid not in keep), key=lambda c: (c.order, c.uuid))
    return Plan(
        keep=dict(keep),
        delete=[c.uuid for c in doomed],
        bytes_freed=sum(c.size for c in doomed),
    )
