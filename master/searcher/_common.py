"""Small helpers shared by the grid, random and ASHA searchers (private)."""

from __future__ import annotations

import math
from typing import Any

from detlab.expconf import ExperimentConfig
from master.searcher.base import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Resume,
    SearchMethod,
    Shutdown,
    ValidateAfter,
)


def encode_float(value: float) -> float | str:
    """A float for strict JSON: non-finite values become the strings "inf", "-inf", "nan"."""
    value = float(value)
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def decode_float(value: float | str) -> float:
    """Inverse of `encode_float`."""
    return float(value)


def as_metric(value: Any, smaller_is_better: bool) -> float | None:
    """A searcher metric as a float; NaN/inf/non-numbers become the worst value; None if absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        value = float(value)
    try:
        metric = float(value)
    except (TypeError, ValueError):
        metric = math.nan
    if math.isnan(metric):
        return math.inf if smaller_is_better else -math.inf
    return metric


def concurrency_limit(config: ExperimentConfig, max_trials: int) -> int:
    """`max_concurrent_trials`, where 0 (no limit) means as many as there are trials."""
    limit = config.searcher.max_concurrent_trials
    return max(1, min(limit, max_trials)) if limit > 0 else max(1, max_trials)


class IndependentSearch(SearchMethod):
    """Trials that each train straight to max_length and are closed: the base of grid/random.

    Subclasses say how many trials there are (`total`), where a trial's hyperparameters come
    from (`_next_hparams`) and whether an INVALID_HP trial is replaced (`replace_invalid`).
    A trial is "running" from its Create until it validates at max_length or exits, then "done";
    replaced invalid trials are forgotten. A trial `det experiment continue` takes up again is
    "waiting" until it has a slot under max_concurrent_trials, then "running" again.
    """

    replace_invalid: bool = False

    def __init__(self, config: ExperimentConfig, seed: int) -> None:
        super().__init__(config, seed)
        # request id -> "running" | "done" | "waiting", in creation order
        self.trials: dict[str, str] = {}
        self.results = 0  # trials that validated at max_length
        self.failed = 0  # trials that errored, were canceled, or were invalid (not replaced)
        self.invalid = 0  # INVALID_HP trials, replaced or not
        self.issued = 0  # Creates that count towards `total` (replaced ones do not)
        self.started = False
        self.shut_down = False

    # -- what subclasses provide ---------------------------------------------------------

    @property
    def total(self) -> int:
        raise NotImplementedError

    def _next_hparams(self) -> dict[str, Any] | None:
        """Hyperparameters for the next trial (None: sample from the space)."""
        return None

    # -- events ----------------------------------------------------------------------------

    def initial_operations(self) -> list[Operation]:
        if self.started:
            return []
        self.started = True
        return self._fill()

    def on_validation_completed(
        self, request_id: str, metric: float, length: int
    ) -> list[Operation]:
        if self.trials.get(request_id) != "running" or length < self.max_length:
            return []
        self.trials[request_id] = "done"
        self.results += 1
        return [Close(request_id), *self._fill()]

    def on_trial_closed(self, request_id: str) -> list[Operation]:
        # Closed by the master before it validated (e.g. killed): no result from it.
        if self.trials.get(request_id) != "running":
            return []
        self.trials[request_id] = "done"
        self.failed += 1
        return self._fill()

    def on_trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Operation]:
        if self.trials.get(request_id) != "running":
            return []
        if reason == ExitedReason.INVALID_HP:
            self.invalid += 1
            if self.replace_invalid:
                del self.trials[request_id]
                self.issued -= 1
                return self._fill()
        self.trials[request_id] = "done"
        self.failed += 1
        return self._fill()

    def on_continue_search(
        self, request_ids: list[str], existing: set[str] | None = None
    ) -> list[Operation]:
        # As Determined's replayed search: a trial it knows that did not finish (errored or
        # canceled) trains on to max_length; a replaced INVALID_HP trial stays gone; then the
        # search creates what it never issued. All of it within max_concurrent_trials: the
        # unfinished trials wait for a slot like new ones (reopening them all at once ran every
        # errored trial beside the ones killed mid-run, more than the limit, until they ended).
        if existing is not None:
            # A Create answered while the experiment was being killed made no trial: issue
            # it again.
            for rid in [r for r in self.trials if r not in existing]:
                del self.trials[rid]
                self.issued -= 1
            # A trial the master ended COMPLETED without telling the searcher (the experiment
            # finished around it) holds no slot.
            reopened = set(request_ids)
            for rid, status in self.trials.items():
                if status == "running" and rid not in reopened:
                    self.trials[rid] = "done"
        for rid in request_ids:
            state = self.trials.get(rid)
            if state is None:
                continue
            if state == "done":
                self.failed = max(0, self.failed - 1)
            self.trials[rid] = "waiting"
        self.shut_down = False
        return self._fill()

    def progress(self, lengths_completed: dict[str, float]) -> float:
        if self.shut_down:
            return 1.0
        if self.total <= 0:
            return 0.0
        done = 0.0
        for rid, state in self.trials.items():
            if state == "done":
                done += self.max_length
            else:
                done += max(0.0, min(float(lengths_completed.get(rid, 0.0)), self.max_length))
        return max(0.0, min(1.0, done / (self.total * self.max_length)))

    # -- internals -------------------------------------------------------------------------

    def _running(self) -> int:
        return sum(1 for state in self.trials.values() if state == "running")

    def _fill(self) -> list[Operation]:
        """Resume waiting trials, then create new ones, while there is room; shut down once
        every trial is done."""
        ops: list[Operation] = []
        if self.shut_down:
            return ops
        limit = concurrency_limit(self.config, self.total)
        running = self._running()
        if running < limit:
            for rid in [r for r, state in self.trials.items() if state == "waiting"]:
                if running >= limit:
                    break
                self.trials[rid] = "running"
                running += 1
                ops += [Resume(rid), ValidateAfter(rid, self.max_length)]
        while self.issued < self.total and running < limit:
            create: Create = self._create(self._next_hparams())
            self.trials[create.request_id] = "running"
            self.issued += 1
            running += 1
            ops += [create, ValidateAfter(create.request_id, self.max_length)]
        # `running == 0` also means nothing waits: a waiting trial would have taken a slot.
        if self.issued >= self.total and running == 0:
            self.shut_down = True
            # A search in which no trial produced a result has failed.
            ops.append(Shutdown(failure=self.results == 0 and self.total > 0))
        return ops

    def _state(self) -> dict[str, Any]:
        return {
            "trials": [[rid, state] for rid, state in self.trials.items()],
            "results": self.results,
            "failed": self.failed,
            "invalid": self.invalid,
            "issued": self.issued,
            "started": self.started,
            "shut_down": self.shut_down,
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        self.trials = {rid: status for rid, status in state["trials"]}
        self.results = int(state["results"])
        self.failed = int(state["failed"])
        self.invalid = int(state["invalid"])
        self.issued = int(state["issued"])
        self.started = bool(state["started"])
        self.shut_down = bool(state["shut_down"])
