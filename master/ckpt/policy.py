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
import operator
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

    def rank(c: Candidate) -> tuple[float, float, str]:  # by metric, ties to the newer one
        return (sign * c.metric, -c.order, c.uuid)  # type: ignore[operator]

    def newest(c: Candidate) -> tuple[float, str]:
        return (-c.order, c.uuid)

    # One pass groups by trial; each trial's best/latest is a heap selection (min() for n=1),
    # never a sort of the whole experiment: 10,000 candidates plan in milliseconds.
    keep: dict[str, list[str]] = defaultdict(list)
    scored = [c for c in cands if _has_metric(c)]
    if policy.save_experiment_best > 0:
        for c in heapq.nsmallest(policy.save_experiment_best, scored, key=rank):
            keep[c.uuid].append("experiment best")
    if policy.save_trial_best > 0:
        scored_by_trial: dict[int, list[Candidate]] = defaultdict(list)
        for c in scored:
            scored_by_trial[c.trial_id].append(c)
        for group in scored_by_trial.values():
            for c in heapq.nsmallest(policy.save_trial_best, group, key=rank):
                keep[c.uuid].append("trial best")
    if policy.save_trial_latest > 0:
        by_trial: dict[int, list[Candidate]] = defaultdict(list)
        for c in cands:
            by_trial[c.trial_id].append(c)
        for group in by_trial.values():
            for c in heapq.nsmallest(policy.save_trial_latest, group, key=newest):
                keep[c.uuid].append("trial latest")
    for c in cands:
        if c.protected:
            keep[c.uuid].append("protected")
    doomed = [c for c in cands if c.uuid not in keep]
    doomed.sort(key=_OLDEST_FIRST)
    return Plan(
        keep=dict(keep),
        delete=[c.uuid for c in doomed],
        bytes_freed=sum(c.size for c in doomed),
    )


_OLDEST_FIRST = operator.itemgetter(2, 0)  # (order, uuid) of a Candidate
