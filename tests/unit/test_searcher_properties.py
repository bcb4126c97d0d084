"""Property tests for every searcher, driven by a random simulation of the master.

The simulator mirrors master/services (searcher.py, trials.py): trials finish their current
ValidateAfter in random order with random metrics (some non-finite), some exit early (INVALID_HP,
ERRORED) or are ended by the master, Close completes an idle trial at once, Stop ends a trial
later, and the searcher is snapshotted through strict JSON with sorted keys (like PostgreSQL JSONB)
and restored at random points. It checks the searchers' invariants at every step.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detlab.expconf import ExperimentConfig, parse_experiment_config
from master.searcher import (
    AdaptiveASHASearch,
    Close,
    Create,
    ExitedReason,
    Operation,
    SearchMethod,
    Shutdown,
    Stop,
    ValidateAfter,
    make_searcher,
)
from master.searcher._common import concurrency_limit
from master.searcher.asha_layout import promote_quota
from master.searcher.grid import grid_trials

HPARAMS = {
    "lr": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 3},
    "layers": {"type": "int", "minval": 1, "maxval": 4, "count": 2},
    "opt": {"type": "categorical", "vals": ["adam", "sgd"]},
}


def make_config(kind: str, p: dict[str, Any]) -> ExperimentConfig:
    s: dict[str, Any] = {
        "metric": "loss",
        "smaller_is_better": p["smaller"],
        "max_concurrent_trials": p["concurrent"],
        "max_length": {"batches": p["max_length"]},
    }
    if kind == "grid":
        s.update(name="grid", max_trials=p["grid_cap"])
    elif kind == "random":
        s.update(name="random", max_trials=p["max_trials"])
    else:
        s.update(
            name="adaptive_asha",
            max_trials=p["max_trials"],
            divisor=p["divisor"],
            max_rungs=p["max_rungs"],
            mode=p["mode"],
            sampler=p.get("sampler", "tpe"),
        )
        if p["bracket_rungs"]:
            s["bracket_rungs"] = p["bracket_rungs"]
        if kind == "asha_stop_once":
            s["stop_once"] = True
        if kind == "asha_time":
            s.update(max_length=None, time_metric="batches", max_time=p["max_length"])
    return parse_experiment_config(
        {"entrypoint": "python3 train.py", "hyperparameters": HPARAMS, "searcher": s}
    )


@dataclass
class SimTrial:
    bracket: int | None
    target: int = 0
    completed: int = 0  # last length it reported at
    time: int = 0  # time form: last reported time
    closing: bool = False
    ended: bool = False
    invalid: bool = False
    stopped: bool = False  # got Stop; the master ends it later
    errored_at: int | None = None


@dataclass
class Sim:
    """A model of the master around one searcher, with invariant checks."""

    config: ExperimentConfig
    seed: int
    rng: random.Random
    p_invalid: float
    p_error: float
    p_closed: float
    restore_at: frozenset[int] = frozenset()
    trace: list[Any] = field(default_factory=list)
    trials: dict[str, SimTrial] = field(default_factory=dict)
    shut_down: bool = False
    steps: int = 0
    # promotion-rule model (ASHA): (bracket, length) -> [(rid, metric, lost, seq)]
    rung_results: dict[tuple[int, int], list[tuple[str, float, bool, int]]] = field(
        default_factory=dict
    )
    rung_promoted: dict[tuple[int, int], set[str]] = field(default_factory=dict)
    seq: int = 0

    def __post_init__(self) -> None:
        self.s = self.config.searcher
        self.kind = self.s.name
        self.searcher: SearchMethod = make_searcher(self.config, self.seed)
        self.asha = isinstance(self.searcher, AdaptiveASHASearch)
        self.time_based = self.s.time_metric is not None
        self.stopping = self.asha and (self.time_based or self.s.stop_once)
        self.max_trials = (
            grid_trials(self.config) if self.kind == "grid" else int(self.s.max_trials)  # type: ignore[arg-type]
        )
        self.limit = concurrency_limit(self.config, self.max_trials)
        self.divisor = self.s.divisor
        self.smaller = self.s.smaller_is_better

    # -- helpers --------------------------------------------------------------------------

    def outstanding(self, t: SimTrial) -> bool:
        return not t.ended and not t.stopped and t.target > t.completed

    def key(self, entry: tuple[str, float, bool, int]) -> tuple[bool, float, int]:
        _, metric, lost, seq = entry
        return (lost, metric if self.smaller else -metric, seq)

    def rung_lengths(self, rid: str) -> tuple[int, ...]:
        b = self.trials[rid].bracket
        assert isinstance(self.searcher, AdaptiveASHASearch) and b is not None
        return self.searcher.brackets[b].lengths

    def top_length(self, rid: str) -> int:
        return self.rung_lengths(rid)[-1]

    def add_result(self, rid: str, length: int, metric: float, lost: bool) -> None:
        b = self.trials[rid].bracket
        assert b is not None
        self.rung_results.setdefault((b, length), []).append((rid, metric, lost, self.seq))
        self.seq += 1

    # -- applying operations like master/services/experiment/searcher.py -----------------------

    def apply(self, ops: list[Operation]) -> None:
        queue = list(ops)
        while queue:
            op = queue.pop(0)
            self.trace.append(op)
            if isinstance(op, Create):
                assert not self.shut_down, "Create after Shutdown"
                assert op.request_id not in self.trials
                b = None
                if isinstance(self.searcher, AdaptiveASHASearch):
                    b = self.searcher.bracket_of(op.request_id)
                self.trials[op.request_id] = SimTrial(bracket=b)
                live = sum(1 for t in self.trials.values() if not t.invalid)
                assert live <= self.max_trials, "more trials than max_trials"
                queue += self.searcher.on_trial_created(op.request_id)
            elif isinstance(op, ValidateAfter):
                assert not self.shut_down, "ValidateAfter after Shutdown"
                t = self.trials[op.request_id]
                assert not t.ended and not t.stopped
                assert op.length > t.target, "lengths for a trial must grow"
                if self.asha and t.target > 0:
                    self.check_promotion(op.request_id, t.target)
                if self.time_based or not self.asha:
                    assert op.length == self.searcher.max_length
                t.target = op.length
                t.closing = False
            elif isinstance(op, Close):
                t = self.trials[op.request_id]
                if t.ended:
                    continue
                t.closing = True
                if t.completed >= t.target:  # idle: completed at once
                    t.ended = True
                    queue += self.searcher.on_trial_closed(op.request_id)
            elif isinstance(op, Stop):
                assert self.time_based
                t = self.trials[op.request_id]
                assert not t.ended and not t.stopped
                t.stopped = True
            elif isinstance(op, Shutdown):
                assert not self.shut_down, "Shutdown twice"
                self.shut_down = True
        running = sum(1 for t in self.trials.values() if self.outstanding(t))
        assert running <= self.limit, f"{running} trials with work, limit {self.limit}"

    def check_promotion(self, rid: str, from_length: int) -> None:
        """The ASHA promotion rule, checked against the simulator's own record of results.

        Stopping (stop_once): the trial that just reported continues iff it is in the top
        max(floor(n / divisor), 1) of its rung.
        """
        b = self.trials[rid].bracket
        assert b is not None
        results = sorted(self.rung_results.get((b, from_length), []), key=self.key)
        quota = promote_quota(len(results), self.divisor)
        if self.stopping:
            assert self.trace[-2] == ("reported", rid), "stopping searchers never resume a trial"
            quota = max(quota, 1)
            assert rid in [entry[0] for entry in results[:quota]]
            return
        top = [entry[0] for entry in results[:quota]]
        assert rid in top, f"promoted {rid} is not in the top {quota} of {len(results)}"
        promoted = self.rung_promoted.setdefault((b, from_length), set())
        assert rid not in promoted
        promoted.add(rid)
        assert len(promoted) <= quota, "more promotions than floor(results / divisor)"

    # -- events -----------------------------------------------------------------------------

    def metric(self) -> float:
        r = self.rng.random()
        if r < 0.05:  # the master turns non-finite metrics into the worst value
            return math.inf if self.smaller else -math.inf
        return round(self.rng.uniform(0, 1), 2)  # some ties

    def maybe_restore(self) -> None:
        if self.steps in self.restore_at:
            snap = self.searcher.snapshot()
            text = json.dumps(snap, allow_nan=False, sort_keys=True)
            restored = make_searcher(self.config, self.seed + 1)
            restored.restore(json.loads(text))
            assert restored.snapshot() == json.loads(json.dumps(snap, allow_nan=False))
            self.searcher = restored

    def run(self, max_steps: int = 5000) -> list[Any]:
        self.apply(self.searcher.initial_operations())
        json.dumps(self.searcher.snapshot(), allow_nan=False)
        while True:
            self.steps += 1
            assert self.steps < max_steps, "the search does not end"
            self.maybe_restore()
            self.trace.append(round(self.searcher.progress(self.lengths()), 9))
            active = [rid for rid, t in self.trials.items() if self.outstanding(t)]
            stopped = [rid for rid, t in self.trials.items() if t.stopped and not t.ended]
            if not active and not stopped:
                break
            pick = self.rng.choice(active + stopped)
            self.event(pick)
            json.dumps(self.searcher.snapshot(), allow_nan=False)
        assert self.shut_down, "every trial reported but no Shutdown"
        assert self.searcher.progress(self.lengths()) == 1.0
        for rid, t in self.trials.items():
            assert t.ended or t.invalid or t.errored_at is not None, f"{rid} never ended"
        return self.trace

    def lengths(self) -> dict[str, float]:
        return {rid: float(max(t.completed, t.time)) for rid, t in self.trials.items()}

    def event(self, rid: str) -> None:
        t = self.trials[rid]
        if t.stopped:  # the preempted trial exits; the master closes it
            if self.rng.random() < 0.3:  # it raced to its end first: ignored
                assert self.searcher.on_validation_completed(rid, self.metric(), t.target) == []
            t.ended = True
            self.apply(self.searcher.on_trial_closed(rid))
            return
        r = self.rng.random()
        if r < self.p_invalid:
            t.ended = t.invalid = True
            self.trace.append(("invalid", rid))
            if self.asha:
                b = t.bracket
                for key in list(self.rung_results):
                    if key[0] == b:
                        self.rung_results[key] = [e for e in self.rung_results[key] if e[0] != rid]
                for key, promoted in self.rung_promoted.items():
                    if key[0] == b:
                        promoted.discard(rid)
            self.apply(self.searcher.on_trial_exited_early(rid, ExitedReason.INVALID_HP))
            return
        if r < self.p_invalid + self.p_error + self.p_closed:
            errored = r < self.p_invalid + self.p_error
            t.ended = True
            t.errored_at = t.target
            worst = math.inf if self.smaller else -math.inf
            if self.asha and not self.time_based and t.target < self.top_length(rid):
                self.add_result(rid, t.target, worst, True)
            if self.time_based:  # lost at the next rung it would have passed
                lengths = self.rung_lengths(rid)
                passed = sum(
                    1
                    for k in range(len(lengths) - 1)
                    if any(e[0] == rid for e in self.rung_results.get((t.bracket, lengths[k]), []))
                )
                if passed < len(lengths) - 1:
                    self.add_result(rid, lengths[passed], worst, True)
            if errored:
                self.apply(self.searcher.on_trial_exited_early(rid, ExitedReason.ERRORED))
            else:
                self.apply(self.searcher.on_trial_closed(rid))
            return
        if self.time_based:
            self.time_step(rid, t)
            return
        metric = self.metric()
        t.completed = t.target
        if self.asha:
            self.add_result(rid, t.target, metric, False)
        self.trace.append(("reported", rid))
        self.apply(self.searcher.on_validation_completed(rid, metric, t.target))
        self.exit_if_done(rid, t)

    def exit_if_done(self, rid: str, t: SimTrial) -> None:
        # The allocation exits when there is no more work; a closing trial completes then.
        if not t.ended and t.completed >= t.target and t.closing:
            t.ended = True
            self.apply(self.searcher.on_trial_closed(rid))

    def time_step(self, rid: str, t: SimTrial) -> None:
        """Time form: report validation metrics at a later time; maybe reach max_time."""
        assert isinstance(self.searcher, AdaptiveASHASearch)
        t.time = min(t.target, t.time + self.rng.randint(1, max(1, t.target // 3)))
        metric = self.metric()
        b = t.bracket
        assert b is not None
        lengths = self.searcher.brackets[b].lengths
        passed = [k for k in range(len(lengths) - 1) if lengths[k] <= t.time]
        ops = self.searcher.on_validation_metrics(rid, {"loss": metric, "batches": t.time}, 0)
        self.apply(ops)
        # Check the stopping decision against the simulator's own rungs.
        expected_stop = False
        for k in passed:
            key = (b, lengths[k])
            if any(e[0] == rid for e in self.rung_results.get(key, [])):
                continue
            self.add_result(rid, lengths[k], metric, False)
            results = sorted(self.rung_results[key], key=self.key)
            quota = max(promote_quota(len(results), self.divisor), 1)
            if rid not in [e[0] for e in results[:quota]]:
                expected_stop = True
                break
        assert (Stop(rid) in ops) == expected_stop
        if expected_stop:
            return
        if t.time >= t.target:
            t.completed = t.target
            ops = self.searcher.on_validation_completed(rid, metric, t.target)
            assert Close(rid) in ops
            self.apply(ops)
            self.exit_if_done(rid, t)


KINDS = ["grid", "random", "asha", "asha_stop_once", "asha_time"]

params = st.fixed_dictionaries(
    {
        "smaller": st.booleans(),
        "concurrent": st.integers(0, 5),
        "max_length": st.integers(1, 300),
        "max_trials": st.integers(1, 24),
        "grid_cap": st.one_of(st.none(), st.integers(1, 12)),
        "divisor": st.sampled_from([2.0, 3.0, 4.0, 2.5]),
        "max_rungs": st.integers(1, 5),
        "mode": st.sampled_from(["aggressive", "standard", "conservative"]),
        "sampler": st.sampled_from(["tpe", "random"]),
        "bracket_rungs": st.one_of(st.none(), st.lists(st.integers(1, 4), min_size=1, max_size=3)),
    }
)


def simulate(kind: str, p: dict, seed: int, ev: int, faults: tuple, restore_at=()) -> Sim:
    p_invalid, p_error, p_closed = faults
    sim = Sim(
        make_config(kind, p),
        seed,
        random.Random(ev),
        p_invalid,
        p_error,
        p_closed,
        frozenset(restore_at),
    )
    sim.run()
    return sim


faults = st.tuples(
    st.sampled_from([0.0, 0.0, 0.1, 0.3]),
    st.sampled_from([0.0, 0.0, 0.1, 0.3]),
    st.sampled_from([0.0, 0.0, 0.05]),
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    kind=st.sampled_from(KINDS),
    p=params,
    seed=st.integers(0, 2**32),
    ev=st.integers(0, 2**32),
    f=faults,
)
def test_property_invariants_and_termination(
    kind: str, p: dict, seed: int, ev: int, f: tuple
) -> None:
    # All invariants are asserted inside the simulator as it runs.
    sim = simulate(kind, p, seed, ev, f)
    assert sim.trace.count(Shutdown(False)) + sim.trace.count(Shutdown(True)) == 1


@SETTINGS
@given(
    kind=st.sampled_from(KINDS),
    p=params,
    seed=st.integers(0, 2**32),
    ev=st.integers(0, 2**32),
    f=faults,
    restore_at=st.lists(st.integers(1, 60), max_size=4),
)
def test_property_snapshot_restore_equals_uninterrupted(
    kind: str, p: dict, seed: int, ev: int, f: tuple, restore_at: list[int]
) -> None:
    straight = simulate(kind, p, seed, ev, f)
    resumed = simulate(kind, p, seed, ev, f, restore_at)
    assert resumed.trace == straight.trace
    assert resumed.searcher.snapshot() == straight.searcher.snapshot()


@settings(max_examples=15, deadline=None)
@given(kind=st.sampled_from(KINDS), p=params, seed=st.integers(0, 2**32), ev=st.integers(0, 2**32))
def test_property_deterministic_under_fixed_seed(kind: str, p: dict, seed: int, ev: int) -> None:
    a = simulate(kind, p, seed, ev, (0.1, 0.1, 0.0))
    b = simulate(kind, p, seed, ev, (0.1, 0.1, 0.0))
    assert a.trace == b.trace
    creates = [op for op in a.trace if isinstance(op, Create)]
    other = simulate(kind, p, seed + 1, ev, (0.1, 0.1, 0.0))
    assert [op.request_id for op in other.trace if isinstance(op, Create)] != [
        op.request_id for op in creates
    ]


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(KINDS), p=params, seed=st.integers(0, 2**32), ev=st.integers(0, 2**32))
def test_property_progress_monotone_without_failures(
    kind: str, p: dict, seed: int, ev: int
) -> None:
    sim = simulate(kind, p, seed, ev, (0.0, 0.0, 0.0))
    progress = [x for x in sim.trace if isinstance(x, float)]
    assert all(0.0 <= x <= 1.0 for x in progress)
    assert progress == sorted(progress)


@settings(max_examples=20, deadline=None)
@given(p=params, seed=st.integers(0, 2**32), ev=st.integers(0, 2**32))
def test_property_asha_rung_counts_without_failures(p: dict, seed: int, ev: int) -> None:
    """Without failures every rung ends with exactly floor(results / divisor) promotions."""
    sim = simulate("asha", p, seed, ev, (0.0, 0.0, 0.0))
    assert isinstance(sim.searcher, AdaptiveASHASearch)
    for b, bracket in enumerate(sim.searcher.brackets):
        reached = [0] * len(bracket.lengths)
        for t in sim.trials.values():
            if t.bracket == b:
                for k, length in enumerate(bracket.lengths):
                    reached[k] += t.completed >= length
        assert reached[0] == bracket.trials
        for k in range(1, len(reached)):
            assert reached[k] == promote_quota(reached[k - 1], sim.divisor)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=params,
    seed=st.integers(0, 2**32),
    ev=st.integers(0, 2**32),
    f=faults,
    restore_at=st.lists(st.integers(1, 60), max_size=3),
)
def test_property_gp_sampler_invariants_and_restore(
    p: dict, seed: int, ev: int, f: tuple, restore_at: list[int]
) -> None:
    """The GP sampler keeps every ASHA invariant and restores exactly (fewer examples: fits
    cost ~0.1 s each, and the sampler only changes which hyperparameters new trials get)."""
    p = {**p, "sampler": "gp", "max_trials": min(p["max_trials"], 16)}
    straight = simulate("asha", p, seed, ev, f)
    assert straight.trace.count(Shutdown(False)) + straight.trace.count(Shutdown(True)) == 1
    resumed = simulate("asha", p, seed, ev, f, restore_at)
    assert resumed.trace == straight.trace
    assert resumed.searcher.snapshot() == straight.searcher.snapshot()
