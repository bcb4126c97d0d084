"""`adaptive_asha`: Determined's adaptive asynchronous successive halving.

Layout (as in Determined): the brackets come from `bracket_rungs`, or from `mode` applied to
`max_rungs` capped so that `divisor**(rungs-1)` fits in both max_length and max_trials;
`aggressive` = [max_rungs], `standard` = the upper half, `conservative` = every count from 1 to
max_rungs. Brackets run most-aggressive first and share `max_trials` in proportion to
`divisor**(rungs-1)/rungs` (roughly equal budget per bracket). Rung k of a bracket with r rungs
trains to `max(int(max_length / divisor**(r-1-k)), 1)` (repeated lengths are merged, so lengths
always grow); the top rung is max_length.

Two ways to early-stop:

* Promotion (max_length form, the default). A trial that validates at rung k is promoted to rung
  k+1 while it ranks in the top `floor(results_in_rung / divisor)` of rung k and the rung has
  promoted fewer than that many. Otherwise it gets no op: its process exits and frees its slots,
  the trial stays idle and may be promoted (`ValidateAfter`, resuming from its checkpoint) when
  later results make it promotable. Idle trials are closed once their rung can receive no more
  results; a trial at the top rung is closed after its result.
* Stopping (`stop_once: true`, and Determined 0.38's `time_metric`/`max_time` form). The decision
  is made once, when a trial passes a rung: it continues while it ranks in the top
  `max(floor(results_in_rung / divisor), 1)` of the rung so far, else it is closed (`stop_once`)
  or stopped (`Stop`, time form). In the time form every trial gets one `ValidateAfter(max_time)`
  and rungs are values of `metrics[time_metric]` seen in `on_validation_metrics`.

Trials are created (up to max_trials, spread over the brackets in proportion) whenever fewer
than `max_concurrent_trials` trials have outstanding work; pending promotions come first. An
INVALID_HP trial is forgotten (its results leave the rungs) and replaced; an ERRORED, canceled or
master-closed trial that was training counts as the worst result of the rung it was training for.
Ties rank by arrival (earlier first).

Proposals (`sampler`): `random` (the default) samples every trial uniformly, as Determined does;
`gp` and `tpe` draw two of three new trials from a model (a Gaussian process maximised inside a
trust region around the best results, or TPE) fitted on the longest rung that holds enough
results (BOHB-style, see `master.searcher.model`), the rest uniformly at random. With a
model a trial's hyperparameters depend on the results that arrived before it was created, so
the same seed reproduces a search only when results arrive in the same order. The rules above
(layout, promotions, stopping) are the same for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from detlab.expconf import ExperimentConfig
from master.searcher._common import as_metric, concurrency_limit, decode_float, encode_float
from master.searcher.asha_layout import (
    asha_layout,
    bracket_total_length,
    expected_rung_trials,
    is_stopping,
    is_time_based,
    promote_quota,
)
from master.searcher.base import (
    Close,
    Create,
    ExitedReason,
    Operation,
    SearchMethod,
    Shutdown,
    Stop,
    ValidateAfter,
)
from master.searcher.model import MODELS, RANDOM_FRACTION, Observation, propose

# Names under which the time metric may be missing from a report and mean the steps reported.
_STEP_METRICS = ("batches", "steps_completed")


def _entry_json(e: _Entry) -> list[Any]:
    return [e.request_id, encode_float(e.metric), e.lost, e.promoted, e.seq]


# -- the searcher ---------------------------------------------------------------------------


@dataclass
class _Trial:
    bracket: int
    # running: the rung it trains for (time form: the next rung it will pass);
    # idle: the rung it last reported at.
    rung: int
    state: str  # "running" | "idle" | "done"


@dataclass
class _Entry:
    request_id: str
    metric: float
    lost: bool
    promoted: bool
    seq: int


class AdaptiveASHASearch(SearchMethod):
    """Adaptive ASHA (see the module docstring for the exact rules)."""

    name = "adaptive_asha"

    def __init__(self, config: ExperimentConfig, seed: int) -> None:
        super().__init__(config, seed)
        s = config.searcher
        assert s.max_trials is not None  # the schema requires it for adaptive_asha
        self.metric_name: str = s.metric
        self.smaller_is_better = s.smaller_is_better
        self.divisor = s.divisor
        self.time_based = is_time_based(config)
        self.time_metric: str | None = s.time_metric
        self.stopping = is_stopping(config)
        self.max_trials = s.max_trials
        self.brackets = asha_layout(config)
        self.model: str | None = s.sampler if s.sampler in MODELS else None
        self.limit = concurrency_limit(config, self.max_trials)
        self.expected_total = sum(
            bracket_total_length(
                b.lengths,
                expected_rung_trials(b.trials, len(b.lengths), self.divisor, self.stopping),
            )
            for b in self.brackets
        )
        # state
        self.trials: dict[str, _Trial] = {}  # creation order
        self.hparams: dict[str, dict[str, Any]] = {}  # the model's inputs (sampler tpe/gp)
        self.rungs: list[list[list[_Entry]]] = [[[] for _ in b.lengths] for b in self.brackets]
        self.created = [0 for _ in self.brackets]  # per bracket, INVALID_HP ones not counted
        self.seq = 0
        self.invalid = 0
        self.results = 0
        self.started = False
        self.shut_down = False

    # -- public helpers (tests, previews) ----------------------------------------------------

    def bracket_of(self, request_id: str) -> int | None:
        trial = self.trials.get(request_id)
        return None if trial is None else trial.bracket

    # -- events --------------------------------------------------------------------------

    def initial_operations(self) -> list[Operation]:
        if self.started:
            return []
        self.started = True
        return self._fill()

    def on_validation_completed(
        self, request_id: str, metric: float, length: int
    ) -> list[Operation]:
        trial = self.trials.get(request_id)
        if trial is None or trial.state != "running":
            return []
        lengths = self.brackets[trial.bracket].lengths
        if self.time_based:
            if length < self.max_length:
                return []
            trial.state = "done"
            self.results += 1
            return [Close(request_id), *self._fill()]
        if length < lengths[trial.rung]:
            return []
        value = as_metric(metric, self.smaller_is_better)
        assert value is not None
        self.results += 1
        b, k = trial.bracket, trial.rung
        entry = self._add_entry(b, k, request_id, value, lost=False)
        ops: list[Operation] = []
        if k == len(lengths) - 1:
            trial.state = "done"
            ops.append(Close(request_id))
        elif self.stopping:
            if self._continues(b, k, entry):
                ops.append(self._promote(entry, b, k))
            else:
                trial.state = "done"
                ops.append(Close(request_id))
        else:
            trial.state = "idle"
            if any(e is entry for e in self._promotable(b, k)):
                ops.append(self._promote(entry, b, k))  # it holds its slots already
        return ops + self._fill()

    def on_validation_metrics(self, request_id: str, metrics: dict, steps: int) -> list[Operation]:
        if not self.time_based or not isinstance(metrics, dict):
            return []
        trial = self.trials.get(request_id)
        if trial is None or trial.state != "running":
            return []
        raw_time = metrics.get(self.time_metric) if self.time_metric else None
        if raw_time is None and self.time_metric in _STEP_METRICS:
            raw_time = steps
        try:
            now = float(raw_time)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return []
        value = as_metric(metrics.get(self.metric_name), self.smaller_is_better)
        if not math.isfinite(now) or value is None:
            return []
        b = trial.bracket
        lengths = self.brackets[b].lengths
        top = len(lengths) - 1
        while trial.rung < top and now >= lengths[trial.rung]:
            self.results += 1
            k = trial.rung
            entry = self._add_entry(b, k, request_id, value, lost=False)
            if not self._continues(b, k, entry):
                trial.state = "done"
                return [Stop(request_id), *self._fill()]
            entry.promoted = True
            trial.rung = k + 1
        return []

    def on_trial_closed(self, request_id: str) -> list[Operation]:
        # The master ended a trial we did not close (e.g. killed): a lost result if it trained.
        return self._lost(request_id)

    def on_trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Operation]:
        trial = self.trials.get(request_id)
        if trial is None or trial.state == "done":
            return []
        if reason != ExitedReason.INVALID_HP:
            return self._lost(request_id)
        # Forget it entirely (its results leave the rungs) and let _fill replace it.
        del self.trials[request_id]
        self.hparams.pop(request_id, None)
        self.created[trial.bracket] -= 1
        self.invalid += 1
        for rung in self.rungs[trial.bracket]:
            rung[:] = [e for e in rung if e.request_id != request_id]
        return self._fill()

    def progress(self, lengths_completed: dict[str, float]) -> float:
        if self.shut_down:
            return 1.0
        if self.expected_total <= 0:
            return 0.0
        done = sum(
            max(0.0, min(float(lengths_completed.get(rid, 0.0)), float(self.max_length)))
            for rid in self.trials
        )
        return max(0.0, min(1.0, done / self.expected_total))

    # -- rungs -----------------------------------------------------------------------------

    def _key(self, entry: _Entry) -> tuple[bool, float, int]:
        value = entry.metric if self.smaller_is_better else -entry.metric
        return (entry.lost, value, entry.seq)

    def _ranked(self, b: int, k: int) -> list[_Entry]:
        return sorted(self.rungs[b][k], key=self._key)

    def _add_entry(self, b: int, k: int, request_id: str, metric: float, *, lost: bool) -> _Entry:
        entry = _Entry(request_id, metric, lost, False, self.seq)
        self.seq += 1
        self.rungs[b][k].append(entry)
        return entry

    def _continues(self, b: int, k: int, entry: _Entry) -> bool:
        """Stopping form: the entry is in the top max(floor(n/divisor), 1) of its rung."""
        ranked = self._ranked(b, k)
        quota = max(promote_quota(len(ranked), self.divisor), 1)
        return any(e is entry for e in ranked[:quota])

    def _promotable(self, b: int, k: int) -> list[_Entry]:
        """Promotion form: idle trials of rung k that may be promoted now, best first."""
        if self.stopping or k >= len(self.brackets[b].lengths) - 1:
            return []
        ranked = self._ranked(b, k)
        quota = promote_quota(len(ranked), self.divisor)
        room = quota - sum(1 for e in ranked if e.promoted)
        out: list[_Entry] = []
        for entry in ranked[:quota]:
            if len(out) >= room:
                break
            trial = self.trials.get(entry.request_id)
            if (
                not entry.promoted
                and not entry.lost
                and trial is not None
                and trial.state == "idle"
                and trial.rung == k
            ):
                out.append(entry)
        return out

    def _promote(self, entry: _Entry, b: int, k: int) -> ValidateAfter:
        trial = self.trials[entry.request_id]
        entry.promoted = True
        trial.rung = k + 1
        trial.state = "running"
        return ValidateAfter(entry.request_id, self.brackets[b].lengths[k + 1])

    def _lost(self, request_id: str) -> list[Operation]:
        trial = self.trials.get(request_id)
        if trial is None or trial.state == "done":
            return []
        if trial.state == "running" and trial.rung < len(self.brackets[trial.bracket].lengths) - 1:
            worst = math.inf if self.smaller_is_better else -math.inf
            self._add_entry(trial.bracket, trial.rung, request_id, worst, lost=True)
        trial.state = "done"
        return self._fill()

    # -- creating, promoting, closing ------------------------------------------------------

    def _running(self) -> int:
        return sum(1 for t in self.trials.values() if t.state == "running")

    def _next_bracket(self) -> int | None:
        """The bracket furthest behind its share of trials (earliest on ties), if any."""
        best: int | None = None
        for i, bracket in enumerate(self.brackets):
            if self.created[i] >= bracket.trials:
                continue
            if best is None or (
                self.created[i] * self.brackets[best].trials < self.created[best] * bracket.trials
            ):
                best = i
        return best

    def _next_promotion(self) -> tuple[int, int, _Entry] | None:
        if self.stopping:
            return None
        for b, bracket in enumerate(self.brackets):
            for k in range(len(bracket.lengths) - 2, -1, -1):
                promotable = self._promotable(b, k)
                if promotable:
                    return b, k, promotable[0]
        return None

    def _fill(self) -> list[Operation]:
        ops: list[Operation] = []
        if self.shut_down:
            return ops
        running = self._running()
        b: int | None
        while running < self.limit:
            promotion = self._next_promotion()
            if promotion is not None:
                b, k, entry = promotion
                ops.append(self._promote(entry, b, k))
                running += 1
                continue
            b = self._next_bracket()
            if b is None:
                break
            create = self._new_trial()
            self.trials[create.request_id] = _Trial(b, 0, "running")
            self.created[b] += 1
            running += 1
            first = self.max_length if self.time_based else self.brackets[b].lengths[0]
            ops += [create, ValidateAfter(create.request_id, first)]
        ops += self._close_settled()
        if running == 0 and self._next_bracket() is None:
            for rid, trial in self.trials.items():  # nothing can promote them any more
                if trial.state == "idle":
                    trial.state = "done"
                    ops.append(Close(rid))
            self.shut_down = True
            ops.append(Shutdown(failure=self.results == 0))
        return ops

    def _new_trial(self) -> Create:
        """A Create whose hyperparameters come from the model (sampler tpe/gp) or at random."""
        if self.model is None:
            return self._create()
        hparams = None
        if self.rng.random() >= RANDOM_FRACTION:
            seed = self.rng.randrange(2**31)
            space = self.config.hyperparameters
            hparams = propose(
                space,
                self._observations(),
                seed,
                self.smaller_is_better,
                self.model,
                pending=self._pending() if self.model == "gp" else (),
            )
        create = self._create(hparams)
        self.hparams[create.request_id] = create.hparams
        return create

    def _observations(self) -> list[Observation]:
        """Every rung result with known hyperparameters, in arrival order (lost ones left out)."""
        out: list[tuple[int, Observation]] = []
        for b, bracket in enumerate(self.brackets):
            for k, rung in enumerate(self.rungs[b]):
                for e in rung:
                    hparams = self.hparams.get(e.request_id)
                    if hparams is not None and not e.lost:
                        out.append((e.seq, Observation(hparams, bracket.lengths[k], e.metric)))
        out.sort(key=lambda pair: pair[0])
        return [obs for _seq, obs in out]

    def _pending(self) -> list[dict[str, Any]]:
        """Hyperparameters of the trials training now (their next result is not in yet)."""
        return [
            self.hparams[rid]
            for rid, trial in self.trials.items()
            if trial.state == "running" and rid in self.hparams
        ]

    def _close_settled(self) -> list[Operation]:
        """Close idle trials of rungs that can receive no more results and cannot promote them.

        Rung k of a bracket is settled once the bracket has created all its trials, no trial
        trains for a rung <= k and no promotion into a rung <= k is pending.
        """
        if self.stopping:
            return []
        ops: list[Operation] = []
        for b, bracket in enumerate(self.brackets):
            if self.created[b] < bracket.trials:
                continue
            top = len(bracket.lengths) - 1
            settled = top
            trial: _Trial | None
            for trial in self.trials.values():
                if trial.bracket == b and trial.state == "running":
                    settled = min(settled, trial.rung)
            pending: dict[int, set[str]] = {}
            for k in range(settled):
                pending[k] = {e.request_id for e in self._promotable(b, k)}
                if pending[k]:
                    settled = min(settled, k + 1)
            for k in range(settled):
                for entry in self.rungs[b][k]:
                    trial = self.trials.get(entry.request_id)
                    if (
                        trial is not None
                        and trial.state == "idle"
                        and trial.rung == k
                        and entry.request_id not in pending.get(k, set())
                    ):
                        trial.state = "done"
                        ops.append(Close(entry.request_id))
        return ops

    # -- persistence -----------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "trials": [[rid, t.bracket, t.rung, t.state] for rid, t in self.trials.items()],
            "hparams": self.hparams,
            "rungs": [[[_entry_json(e) for e in rung] for rung in b] for b in self.rungs],
            "created": list(self.created),
            "seq": self.seq,
            "invalid": self.invalid,
            "results": self.results,
            "started": self.started,
            "shut_down": self.shut_down,
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        self.trials = {
            rid: _Trial(int(b), int(k), str(status)) for rid, b, k, status in state["trials"]
        }
        self.rungs = [
            [
                [
                    _Entry(rid, decode_float(m), bool(lost), bool(promoted), int(seq))
                    for rid, m, lost, promoted, seq in rung
                ]
                for rung in bracket
            ]
            for bracket in state["rungs"]
        ]
        # Snapshots from before model-based proposals have no hyperparameters: the model then
        # learns from the trials created after the restore only.
        self.hparams = dict(state.get("hparams") or {})
        self.created = [int(n) for n in state["created"]]
        self.seq = int(state["seq"])
        self.invalid = int(state["invalid"])
        self.results = int(state["results"])
        self.started = bool(state["started"])
        self.shut_down = bool(state["shut_down"])
