"""Searches in virtual time: a detlab searcher (or an Optuna study), an objective, W workers.

Both sides share one cost model: training a trial from length a to length b takes b - a units of
virtual time on one worker (a resumed trial pays only the added length), validation and
bookkeeping are free, and every worker trains at the same rate. The budget used at time t is
the integral of busy workers up to t, so work in flight counts and results arriving after the
budget is spent do not.

detlab: the simulator plays the master. `Create` makes a trial; `ValidateAfter(L)` queues the
trial for a worker (FIFO) unless it holds one; when a segment ends, the metric goes to
`on_validation_metrics` and `on_validation_completed` at once (asynchronous). If the searcher
then gave the trial another `ValidateAfter`, it keeps its worker and trains on; if it closed it
(`Close`, or `Stop`, treated alike), it ends
(`on_trial_closed`); otherwise it is idle: it frees its worker and may be resumed later.
The search ends at `Shutdown` once nothing runs, when nothing is left to run, or when the
budget is spent.

Optuna: each worker runs one trial at a time, reporting the metric at the same lengths (the
ASHA rungs) and stopping when `should_prune()` says so; new trials are asked for while budget
remains. Both record every validation as (budget used, virtual time, best so far).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.objectives import Objective
from master.searcher import Close, Create, Operation, SearchMethod, Shutdown, Stop, ValidateAfter


@dataclass
class SearchResult:
    """One search: its validations as (budget used, time, best so far), and totals."""

    points: list[tuple[float, float, float]] = field(default_factory=list)
    created: list[float] = field(default_factory=list)  # the budget used at each trial's start
    budget_used: float = 0.0
    makespan: float = 0.0  # virtual time from the first operation to the end
    trials: int = 0
    validations: int = 0
    shutdown: bool = False  # the searcher (or Optuna side) ended the search itself
    best: float = math.inf
    # (budget used, hparams) each time the best improved: what the search would recommend
    incumbents: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    @property
    def best_hparams(self) -> dict[str, Any] | None:
        """The hyperparameters of the best validation so far (None: none yet)."""
        return self.incumbents[-1][1] if self.incumbents else None

    def best_at(self, budget: float) -> float:
        """The best metric among validations completed within `budget` (inf: none yet)."""
        best = math.inf
        for used, _t, b in self.points:
            if used > budget + 1e-9:
                break
            best = b
        return best

    def best_hparams_at(self, budget: float) -> dict[str, Any] | None:
        """The hyperparameters of the best validation completed within `budget` (None: none)."""
        best = None
        for used, hparams in self.incumbents:
            if used > budget + 1e-9:
                break
            best = hparams
        return best

    def trials_within(self, budget: float) -> int:
        """Trials started before `budget` was used up."""
        return sum(1 for used in self.created if used < budget - 1e-9 or used == 0)

    def budget_to_reach(self, target: float) -> float:
        """The budget used when the best first reached `target` or better (inf: never)."""
        for used, _t, b in self.points:
            if b <= target:
                return used
        return math.inf

    def _record(self, used: float, now: float, metric: float, hparams: dict[str, Any]) -> None:
        self.validations += 1
        if metric < self.best:
            self.best = metric
            self.incumbents.append((used, hparams))
        self.points.append((used, now, self.best))


@dataclass
class _SimTrial:
    request_id: str
    hparams: dict[str, Any]
    handle: Any  # the objective's trial
    length: int = 0
    pending: deque[int] = field(default_factory=deque)
    running: bool = False
    queued: bool = False
    close_requested: bool = False
    closed: bool = False


class _Clock:
    """Virtual time and the busy-worker integral (the budget used)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.now = 0.0
        self.used = 0.0
        self.busy = 0
        self.events: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()

    def start(self, duration: float, payload: Any) -> None:
        self.busy += 1
        heapq.heappush(self.events, (self.now + duration, next(self._seq), payload))

    def advance(self, budget: float) -> Any | None:
        """Move to the next segment end (freeing its worker); None when the budget runs out."""
        t, _, payload = heapq.heappop(self.events)
        spend = self.busy * (t - self.now)
        if self.used + spend > budget + 1e-9:  # the budget is spent before this segment ends
            self.now += (budget - self.used) / self.busy if self.busy else 0.0
            self.used = budget
            return None
        self.used += spend
        self.now = t
        self.busy -= 1
        return payload


def run_detlab(
    searcher: SearchMethod,
    objective: Objective,
    workers: int,
    budget: float = math.inf,
    smaller_is_better: bool = True,
) -> SearchResult:
    """Drive `searcher` against `objective` on `workers` workers until it ends or `budget` runs out.

    The metric goes to the searcher as is; `SearchResult` keeps the best in the searcher's
    sense, recorded as the value (smaller_is_better=False records maximised values negated).
    """
    sign = 1.0 if smaller_is_better else -1.0
    metric_name = searcher.config.searcher.metric
    trials: dict[str, _SimTrial] = {}
    queue: deque[str] = deque()
    clock = _Clock(workers)
    result = SearchResult()
    shutdown = False

    def handle(ops: Iterable[Operation]) -> None:
        nonlocal shutdown
        for op in ops:
            if isinstance(op, Create):
                trials[op.request_id] = _SimTrial(
                    op.request_id, op.hparams, objective.trial(op.hparams, op.seed)
                )
                result.trials += 1
                result.created.append(clock.used)
                handle(searcher.on_trial_created(op.request_id))
            elif isinstance(op, ValidateAfter):
                trial = trials[op.request_id]
                if trial.closed:
                    raise RuntimeError(f"ValidateAfter for closed trial {op.request_id}")
                trial.pending.append(op.length)
                if not trial.running and not trial.queued:
                    trial.queued = True
                    queue.append(trial.request_id)
            elif isinstance(op, Close | Stop):  # Stop (time form): like Close here
                trial = trials[op.request_id]
                trial.close_requested = True
                if not trial.running and not trial.pending and not trial.closed:
                    close(trial)
            elif isinstance(op, Shutdown):
                shutdown = True
            else:
                raise TypeError(f"unknown operation {op!r}")

    def close(trial: _SimTrial) -> None:
        trial.closed = True
        handle(searcher.on_trial_closed(trial.request_id))

    def train(trial: _SimTrial) -> None:
        """Start the trial's next segment on a worker it holds."""
        target = trial.pending.popleft()
        trial.running = True
        clock.start(max(0, target - trial.length), (trial.request_id, target))

    def dispatch() -> None:
        while queue and clock.busy < clock.workers and not shutdown:
            trial = trials[queue.popleft()]
            trial.queued = False
            if trial.pending and not trial.closed:
                train(trial)

    handle(searcher.initial_operations())
    dispatch()
    while clock.events:
        payload = clock.advance(budget)
        if payload is None:
            break
        request_id, target = payload
        trial = trials[request_id]
        trial.length = max(trial.length, target)
        metric = float(trial.handle.train_to(target))
        result._record(clock.used, clock.now, sign * metric, trial.hparams)
        handle(searcher.on_validation_metrics(request_id, {metric_name: metric}, target))
        handle(searcher.on_validation_completed(request_id, metric, target))
        trial.running = False
        if trial.pending and not shutdown:  # keeps its worker: the next segment starts at once
            train(trial)
        elif trial.close_requested and not trial.closed:
            close(trial)
        dispatch()
    result.shutdown = shutdown
    result.budget_used = clock.used
    result.makespan = clock.now
    return result


# -- Optuna ---------------------------------------------------------------------------------


def optuna_available() -> str | None:
    """None when Optuna imports; else why not."""
    try:
        import optuna  # noqa: F401
    except ImportError as e:
        return f"optuna is not importable ({e}); pip install -e ."
    return None


def suggest(trial: Any, space: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Sample a detlab hyperparameter space with an Optuna trial (same distributions)."""
    out: dict[str, Any] = {}
    for name in sorted(space):
        hp, key = space[name], prefix + name
        kind = hp["type"]
        if kind == "const":
            out[name] = hp["val"]
        elif kind == "int":
            out[name] = trial.suggest_int(key, hp["minval"], hp["maxval"])
        elif kind == "double":
            out[name] = trial.suggest_float(key, hp["minval"], hp["maxval"])
        elif kind == "log":
            base = hp.get("base", 10.0)
            out[name] = trial.suggest_float(
                key, base ** hp["minval"], base ** hp["maxval"], log=True
            )
        elif kind == "categorical":
            index = trial.suggest_categorical(key, list(range(len(hp["vals"]))))
            out[name] = hp["vals"][index]
        elif kind == "object":
            out[name] = suggest(trial, hp["vals"], f"{key}.")
        else:
            raise ValueError(f"unknown hyperparameter type {kind!r}")
    return out


def run_optuna(
    pruner: Any,
    objective: Objective,
    workers: int,
    budget: float,
    report_at: Sequence[int],
    seed: int,
    max_trials: int | None = None,
    sampler: str = "random",
) -> SearchResult:
    """An Optuna study (`pruner`; RandomSampler, or with sampler "tpe" Optuna's default
    TPESampler) on the same objective, workers and budget.

    Each trial reports its metric at every length in `report_at` (ending at max_length) and
    stops when pruned. New trials start while budget remains (and `max_trials` allows).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        # A fixed name: HyperbandPruner picks each trial's bracket from a hash of the study name.
        study_name=f"bench-{objective.name}-{seed}",
        direction="minimize",
        sampler=(
            optuna.samplers.TPESampler(seed=seed)
            if sampler == "tpe"
            else optuna.samplers.RandomSampler(seed=seed)
        ),
        pruner=pruner,
    )
    steps = sorted(set(int(s) for s in report_at) | {objective.max_length})
    clock = _Clock(workers)
    result = SearchResult()
    committed = 0.0  # lengths started (finished or not)

    def start_trial() -> bool:
        nonlocal committed
        if committed >= budget or (max_trials is not None and result.trials >= max_trials):
            return False
        ot = study.ask()
        hparams = suggest(ot, objective.space)
        handle = objective.trial(hparams, seed * 100_003 + ot.number)
        result.trials += 1
        result.created.append(clock.used)
        state = {"trial": ot, "hparams": hparams, "handle": handle, "step": 0, "length": 0}
        start_segment(state)
        return True

    def start_segment(state: dict[str, Any]) -> None:
        nonlocal committed
        target = steps[state["step"]]
        cost = target - state["length"]
        committed += cost
        clock.start(cost, state)

    while clock.busy < workers and start_trial():
        pass
    while clock.events:
        state = clock.advance(budget)
        if state is None:
            break
        target = steps[state["step"]]
        state["length"] = target
        metric = float(state["handle"].train_to(target))
        result._record(clock.used, clock.now, metric, state["hparams"])
        ot = state["trial"]
        if state["step"] == len(steps) - 1:
            study.tell(ot, metric)
        else:
            ot.report(metric, target)
            if ot.should_prune():
                study.tell(ot, state=optuna.trial.TrialState.PRUNED)
            else:
                state["step"] += 1
                start_segment(state)
                continue
        while clock.busy < workers and start_trial():
            pass
    result.shutdown = not clock.events and committed < budget
    result.budget_used = clock.used
    result.makespan = clock.now
    return result


def rung_lengths(max_length: int, divisor: float, rungs: int) -> list[int]:
    """ASHA-style rung lengths: max_length / divisor^k for k = rungs-1 .. 0 (at least 1)."""
    return sorted({max(1, int(max_length / divisor**k)) for k in range(rungs)})
