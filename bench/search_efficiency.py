"""search_efficiency: best validation metric versus training budget, detlab's searchers vs Optuna.

Objectives (minimised): mf-prior-bench's multi-fidelity Hartmann 3 and 6 in its four noise
presets (fidelity = length, 100 batches = z_max, known optimum) and the digits MLP (validation
loss after up to 150 batches, cosine learning-rate decay over the 150, resumable). Methods,
all on the same objective, the same 8 workers and the same budget B = the cost of 200 trials
trained in full (25 per worker):

- detlab `random` (max_trials = B / max_length),
- detlab `adaptive_asha` (divisor 3, max_rungs 4, mode `standard`, max_trials 1000, which
  spends about B) with Gaussian-process proposals (`sampler: gp`, the one the targets judge)
  and, for reference, with TPE proposals (`sampler: tpe`) and uniformly random ones (the
  default `sampler: random`, Determined's behaviour),
- Optuna's `SuccessiveHalvingPruner` and `HyperbandPruner` (reduction factor 3, min_resource =
  ASHA's lowest rung; trials report at ASHA's rung lengths and stop when pruned), each with
  RandomSampler and with Optuna's default TPESampler; "the best Optuna pruner" is the best of
  the four.

Everything runs in `bench._searchsim`'s virtual time (cost = batches trained, resumes pay only
the added batches, results fed back asynchronously as they complete), median over the seeds.
The wall-time figure is ASHA's makespan for the same experiment (max_concurrent_trials 8,
the default `sampler: random`) on 1 and on 8 slots, run to its natural end.

Why B = 200 full trainings: with 8 busy workers a full-length result arrives at least
8 x max_length of budget after its trial starts, so at a small B (say 50) reaching random's
final best within B/4 means finding it among the trials started in the first tenth of the
budget, before any model has a result to learn from. Latency, not search quality, would
decide the quarter-budget target there.

Targets (from the issue), judged on ASHA's defaults: ASHA reaches random search's final
best with at most a quarter of the budget; at B ASHA's median best is at least as good as the
better Optuna pruner's; ASHA scales close to linearly from 1 to 8 slots (here: a speedup of at
least 6x).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._report import ROOT, Row, cpu, publish, write_section
from bench._searchsim import (
    SearchResult,
    optuna_available,
    run_detlab,
    run_optuna,
    rung_lengths,
)
from bench.objectives import Objective
from bench.objectives.digits import EXPECTED_SEEDS
from detlab.expconf import parse_experiment_config
from master.searcher import SEARCH_METHODS, make_searcher

NAME = "search_efficiency"
STORE = ROOT / "docs" / "search_efficiency.json"  # latest summary per objective
FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
CURVE_POINTS = 64  # per-seed curve samples kept in the raw results
WORKERS = 8
DIVISOR = 3
MAX_RUNGS = 4
TARGET_FRACTION = 0.25
TARGET_SPEEDUP = 6.0
RECOMMENDED_MEANS = {  # what `expected_value` means per objective family (the docs' wording)
    "mfh3": "the noise-free value at z_max",
    "mfh6": "the noise-free value at z_max",
    "digits": f"the mean validation loss over {EXPECTED_SEEDS} fresh trial seeds",
}
RANDOM_TRIALS = 200  # budget B, in full-length trainings
ASHA_TRIALS = 1000  # adaptive_asha max_trials: its natural run spends about B
METHODS = (
    "random",
    "asha",
    "asha_tpe",
    "asha_random",
    "optuna_sh",
    "optuna_hb",
    "optuna_sh_tpe",
    "optuna_hb_tpe",
)
LABELS = {
    "random": "random",
    "asha": "ASHA (sampler gp)",
    "asha_tpe": "ASHA (sampler tpe)",
    "asha_random": "ASHA (sampler random)",
    "optuna_sh": "Optuna SuccessiveHalving + random",
    "optuna_hb": "Optuna Hyperband + random",
    "optuna_sh_tpe": "Optuna SuccessiveHalving + TPE",
    "optuna_hb_tpe": "Optuna Hyperband + TPE",
}


@dataclass
class Setup:
    name: str
    make: Callable[[int], Objective]  # seed -> objective
    random_trials: int  # budget B = random_trials * max_length
    asha_trials: int  # max_trials of the ASHA runs (enough to spend B)
    digits: str = ".3f"


def setups() -> list[Setup]:
    from bench.objectives.digits import DigitsMLP
    from bench.objectives.hartmann import MFHartmann

    out = [
        Setup(
            f"mfh{dims}_{preset}",
            lambda seed, d=dims, p=preset: MFHartmann(d, p, seed=seed),
            random_trials=RANDOM_TRIALS,
            asha_trials=ASHA_TRIALS,
        )
        for dims in (3, 6)
        for preset in ("good", "moderate", "bad", "terrible")
    ]
    digits = DigitsMLP(max_length=150)  # one memo for every seed and method
    # Four decimals: the methods' medians at B differ in the fourth (at three, a 0.0002 gap
    # read "0.102 vs 0.102 (MISSED)").
    out.append(Setup("digits_mlp", lambda seed: digits, RANDOM_TRIALS, ASHA_TRIALS, ".4f"))
    return out


def searcher_config(
    objective: Objective, name: str, max_trials: int, concurrent: int, sampler: str = "gp"
) -> dict[str, Any]:
    searcher: dict[str, Any] = {
        "name": name,
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_length": {"batches": objective.max_length},
        "max_trials": max_trials,
        "max_concurrent_trials": concurrent,
    }
    if name == "adaptive_asha":
        searcher.update(divisor=DIVISOR, max_rungs=MAX_RUNGS, mode="standard", sampler=sampler)
    return parse_experiment_config(
        {
            "name": f"bench-{objective.name}",
            "entrypoint": "python3 train.py",
            "hyperparameters": objective.space,
            "searcher": searcher,
        }
    )


def curve(res: SearchResult, budget: float) -> list[float]:
    return [res.best_at(budget * (i + 1) / CURVE_POINTS) for i in range(CURVE_POINTS)]


def one_seed(args: tuple[str, int, bool]) -> dict[str, Any]:
    """Every method on one seed's objective (args: objective name, seed, with Optuna)."""
    name, seed, optuna = args
    setup = next(s for s in setups() if s.name == name)
    obj = setup.make(seed)
    budget = setup.random_trials * obj.max_length
    rungs = rung_lengths(obj.max_length, DIVISOR, MAX_RUNGS)
    runs: dict[str, SearchResult] = {}
    # ASHA first: random search samples the same first trials, and the digits objective can
    # then continue the models ASHA trained part way (memoised, same results).
    for sampler in ("gp", "tpe"):
        cfg = searcher_config(obj, "adaptive_asha", setup.asha_trials, WORKERS, sampler)
        runs["asha" if sampler == "gp" else "asha_tpe"] = run_detlab(
            make_searcher(cfg, seed), obj, WORKERS, budget
        )
    # The default configuration (sampler random) also gives the 1 vs 8 slots makespan: run to
    # its natural end (about B); its budget-capped curve is that run cut at B (deterministic).
    cfg = searcher_config(obj, "adaptive_asha", setup.asha_trials, WORKERS, "random")
    natural8 = run_detlab(make_searcher(cfg, seed), obj, WORKERS)
    natural1 = run_detlab(make_searcher(cfg, seed), obj, 1)
    runs["asha_random"] = natural8
    cfg = searcher_config(obj, "random", setup.random_trials, WORKERS)
    runs["random"] = run_detlab(make_searcher(cfg, seed), obj, WORKERS, budget)
    if optuna:
        import optuna as op

        pruners = {
            "optuna_sh": lambda: op.pruners.SuccessiveHalvingPruner(
                min_resource=rungs[0], reduction_factor=DIVISOR, min_early_stopping_rate=0
            ),
            "optuna_hb": lambda: op.pruners.HyperbandPruner(
                min_resource=rungs[0], max_resource=obj.max_length, reduction_factor=DIVISOR
            ),
        }
        for suffix, sampler in (("", "random"), ("_tpe", "tpe")):
            for method, pruner in pruners.items():
                runs[method + suffix] = run_optuna(
                    pruner(), obj, WORKERS, budget, rungs, seed, sampler=sampler
                )
    random_final = runs["random"].best_at(budget)
    recommended = {m: r.best_hparams_at(budget) for m, r in runs.items()}
    return {
        "seed": seed,
        "budget": budget,
        "rungs": rungs,
        "best_at": {m: [r.best_at(budget * f) for f in FRACTIONS] for m, r in runs.items()},
        "curves": {m: curve(r, budget) for m, r in runs.items()},
        "trials": {m: r.trials_within(budget) for m, r in runs.items()},
        # What each search's recommendation (its best trial at B) is worth, noise averaged out.
        "recommended": {
            m: obj.expected_value(hp) if hp is not None else math.inf
            for m, hp in recommended.items()
        },
        "asha_to_random_final": runs["asha"].budget_to_reach(random_final) / budget,
        "asha_random_to_random_final": runs["asha_random"].budget_to_reach(random_final) / budget,
        "asha_tpe_to_random_final": runs["asha_tpe"].budget_to_reach(random_final) / budget,
        "asha_natural": {
            "trials": natural8.trials,
            "budget_used": natural8.budget_used,
            "makespan_1": natural1.makespan,
            "makespan_8": natural8.makespan,
            "best_1": natural1.best,
            "best_8": natural8.best,
            "shutdown": natural1.shutdown and natural8.shutdown,
        },
    }


def _one_thread() -> None:
    """Each pool process fits its GP on one thread: the processes already use every core."""
    import torch

    torch.set_num_threads(1)


def searcher_version() -> str:
    """The last commit that changed master/searcher (+dirty when it has uncommitted changes).

    Stored objectives are measured over several runs; this tells which searcher each one saw.
    """
    import subprocess

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)

    head = git("log", "-1", "--format=%h", "--", "master/searcher").stdout.strip() or "unknown"
    dirty = git("diff", "--quiet", "HEAD", "--", "master/searcher").returncode != 0
    return head + ("+dirty" if dirty else "")


def median(values: list[float]) -> float:
    return statistics.median(values)


def paired(seeds: list[dict[str, Any]], a: str, b: str) -> dict[str, float] | None:
    """Seed-by-seed comparison of two methods' best at B: how often `a` is ahead (smaller), and
    the mean difference a - b with its standard error.

    Why: the target compares two medians, and on a noisy objective (digits) each seed's best
    is a lucky draw; this says whether a gap between the medians is larger than that noise.
    """
    diffs = [
        s["best_at"][a][-1] - s["best_at"][b][-1]
        for s in seeds
        if math.isfinite(s["best_at"][a][-1]) and math.isfinite(s["best_at"][b][-1])
    ]
    if not diffs:
        return None
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
    return {
        "ahead": sum(d < 0 for d in diffs),
        "seeds": len(diffs),
        "mean_difference": statistics.fmean(diffs),
        "standard_error": se,
    }


def summarise(setup: Setup, seeds: list[dict[str, Any]], optimum: float | None) -> dict:
    methods = [m for m in METHODS if m in seeds[0]["best_at"]]
    med = {
        m: [median([s["best_at"][m][i] for s in seeds]) for i in range(len(FRACTIONS))]
        for m in methods
    }
    fractions = [s["asha_to_random_final"] for s in seeds]
    timed = [s["asha_natural"] for s in seeds]
    ms1 = [n["makespan_1"] for n in timed]
    ms8 = [n["makespan_8"] for n in timed]
    speedups = [a / b for a, b in zip(ms1, ms8, strict=True) if b > 0]
    optuna = [m for m in methods if m.startswith("optuna")]
    best_optuna = min(optuna, key=lambda m: med[m][-1]) if optuna else None
    recommended = (
        {m: median([s["recommended"][m] for s in seeds]) for m in methods}
        if all("recommended" in s for s in seeds)
        else None
    )
    return {
        "objective": setup.name,
        "searcher": searcher_version(),
        "cpu": cpu(),
        "seeds": len(seeds),
        "budget": seeds[0]["budget"],
        "random_trials": setup.random_trials,
        "rungs": seeds[0]["rungs"],
        "optimum": optimum,
        "median_best_at": med,
        "median_trials": {m: median([s["trials"][m] for s in seeds]) for m in methods},
        "median_recommended": recommended,
        "asha_fraction_to_random_final": median(fractions),
        "asha_fraction_reached": sum(f <= TARGET_FRACTION for f in fractions),
        "asha_random_fraction_to_random_final": median(
            [s["asha_random_to_random_final"] for s in seeds]
        ),
        "asha_tpe_fraction_to_random_final": median([s["asha_tpe_to_random_final"] for s in seeds]),
        "best_optuna": best_optuna,
        "asha_vs_best_optuna": paired(seeds, "asha", best_optuna) if best_optuna else None,
        "makespan_1": median(ms1),
        "makespan_8": median(ms8),
        "speedup": median(speedups) if speedups else math.nan,
        "natural_budget": median([s["asha_natural"]["budget_used"] for s in seeds]),
        "natural_best_1": median([n["best_1"] for n in timed]),
        "natural_best_8": median([n["best_8"] for n in timed]),
    }


def verdicts(s: dict) -> dict[str, bool | None]:
    med = s["median_best_at"]
    out: dict[str, bool | None] = {
        "quarter": s["asha_fraction_to_random_final"] <= TARGET_FRACTION,
        "speedup": s["speedup"] >= TARGET_SPEEDUP,
        "optuna": None,
    }
    if s["best_optuna"]:
        out["optuna"] = med["asha"][-1] <= med[s["best_optuna"]][-1]
    return out


def rows_for(s: dict, fmt: str) -> list[Row]:
    o = s["objective"]
    med = s["median_best_at"]
    v = verdicts(s)

    def num(x: float) -> str:
        return "-" if math.isinf(x) else format(x, fmt)

    def mark(ok: bool | None) -> str:
        return "" if ok is None else (" (met)" if ok else " (MISSED)")

    fr = " / ".join("B" if f == 1 else f"B/{round(1 / f)}" for f in FRACTIONS)
    opt = f", optimum {s['optimum']:.5f}" if s["optimum"] is not None else ""
    rows: list[Row] = [
        (
            f"**{o}** budget B",
            f"{s['budget']:,} batches = {s['random_trials']} full trials "
            f"(rungs {', '.join(map(str, s['rungs']))}{opt})",
            f"median of {s['seeds']} seeds"
            + (f", measured {s['measured']}" if s.get("measured") else "")
            + (f" on searcher {s['searcher']}" if s.get("searcher") else "")
            + (f", {s['cpu']}" if s.get("cpu") else ""),
        ),
    ]
    for m, values in med.items():
        trials = s["median_trials"][m]
        rows.append(
            (
                f"{o} {LABELS[m]}: median best at {fr}",
                " / ".join(num(x) for x in values) + f" ({trials:.0f} trials within B)",
                "",
            )
        )

    def frac(x: float) -> str:
        return "never" if math.isinf(x) else f"{x:.3f} B"

    rows.append(
        (
            f"{o} ASHA: budget to reach random's final best (median of per-seed fractions)",
            frac(s["asha_fraction_to_random_final"])
            + f" ({s['asha_fraction_reached']}/{s['seeds']} seeds within B/4)"
            + mark(v["quarter"])
            + f"; sampler tpe {frac(s['asha_tpe_fraction_to_random_final'])}"
            + f", sampler random {frac(s['asha_random_fraction_to_random_final'])}",
            f"<= {TARGET_FRACTION} B",
        )
    )
    if s["best_optuna"]:
        b = s["best_optuna"]
        rows.append(
            (
                f"{o} at B: ASHA vs best Optuna pruner",
                f"{num(med['asha'][-1])} vs {num(med[b][-1])} ({LABELS[b]})"
                + mark(v["optuna"])
                + f"; sampler tpe {num(med['asha_tpe'][-1])}"
                + f", sampler random {num(med['asha_random'][-1])}"
                + paired_text(s.get("asha_vs_best_optuna"), fmt),
                "ASHA <= Optuna",
            )
        )
    if rec := s.get("median_recommended"):  # summaries stored before 2026-11-26 lack it
        optuna = [m for m in rec if m.startswith("optuna")]
        b = min(optuna, key=lambda m: rec[m]) if optuna else None
        rows.append(
            (
                f"{o} at B: expected metric of the best trial's configuration (median), "
                "ASHA vs best Optuna pruner",
                num(rec["asha"])
                + (f" vs {num(rec[b])} ({LABELS[b]})" if b else "")
                + f"; sampler tpe {num(rec['asha_tpe'])}, sampler random "
                f"{num(rec['asha_random'])}, random search {num(rec['random'])}",
                "not a target: " + RECOMMENDED_MEANS.get(o.split("_")[0], "noise averaged out"),
            )
        )
    rows.append(
        (
            f"{o} ASHA (sampler random) makespan, 1 -> 8 slots (run to its end)",
            f"{s['makespan_1']:,.0f} -> {s['makespan_8']:,.0f} batch-times "
            f"= {s['speedup']:.2f}x (budget {s['natural_budget']:,.0f}; best "
            f"{num(s['natural_best_1'])} / {num(s['natural_best_8'])})" + mark(v["speedup"]),
            f">= {TARGET_SPEEDUP:.0f}x",
        )
    )
    return rows


def paired_text(p: dict[str, float] | None, fmt: str) -> str:
    """The at-B row's seed-by-seed clause (summaries stored before 2026-11-26 have none)."""
    if not p:
        return ""
    return (
        f"; per seed: ASHA ahead on {p['ahead']}/{p['seeds']}, mean difference "
        f"{p['mean_difference']:+{fmt}} (standard error {p['standard_error']:{fmt}})"
    )


def run(
    seeds: int = 10,
    objectives: list[str] | None = None,
    optuna: bool = True,
    docs: bool = True,
    first_seed: int = 0,
) -> bool:
    """Run the benchmark on seeds first_seed .. first_seed + seeds - 1; True when every target
    is met on every objective. A part of a longer run (`first_seed` > 0) is recorded with the
    other parts' raw files (`record_files`) rather than on its own."""
    if "adaptive_asha" not in SEARCH_METHODS or "random" not in SEARCH_METHODS:
        missing = [n for n in ("random", "adaptive_asha") if n not in SEARCH_METHODS]
        raise RuntimeError(f"{NAME}: detlab has no {' or '.join(missing)} searcher yet")
    if optuna and (why := optuna_available()):
        print(f"{NAME}: skipping the Optuna comparison: {why}", flush=True)
        optuna = False
    if seeds < 10:
        print(f"{NAME}: {seeds} seeds (the issue asks for at least 10)", flush=True)
    chosen = [s for s in setups() if not objectives or s.name in objectives]
    if not chosen:
        raise ValueError(f"no objective matches {objectives}")
    summaries, per_seed, rows = [], {}, []
    ok = True
    # Seeds run in parallel processes (each simulation is single-threaded and deterministic).
    pool = ProcessPoolExecutor(max_workers=os.cpu_count() or 1, initializer=_one_thread)
    for setup in chosen:
        t0 = time.monotonic()
        chunk = range(first_seed, first_seed + seeds)
        results = list(pool.map(one_seed, [(setup.name, seed, optuna) for seed in chunk]))
        optimum = setup.make(0).optimum
        s = summarise(setup, results, optimum)
        summaries.append(s)
        per_seed[setup.name] = results
        rows += rows_for(s, setup.digits)
        v = verdicts(s)
        ok = ok and all(x is not False for x in v.values())
        rec = s["median_recommended"] or {}
        expected = ", ".join(
            f"{LABELS[m]} {value:.4f}" for m, value in rec.items() if m == "asha" or "optuna" in m
        )
        print(
            f"  {setup.name}: {time.monotonic() - t0:.1f} s; ASHA reaches random's final best "
            f"at {s['asha_fraction_to_random_final']:.3f} B; at B ASHA "
            f"{s['median_best_at']['asha'][-1]:.4f}"
            + (
                f" vs {LABELS[s['best_optuna']]} {s['median_best_at'][s['best_optuna']][-1]:.4f}"
                if s["best_optuna"]
                else ""
            )
            + f"; speedup 1 -> 8 slots {s['speedup']:.2f}x"
            + (f"; best trial's configuration, expected: {expected}" if expected else ""),
            flush=True,
        )
    pool.shutdown()
    publish(
        NAME,
        summary_text(seeds, seeds, optuna),
        rows,
        {"summaries": summaries, "per_seed": per_seed},
        docs=False,
    )
    if docs and first_seed:
        print(
            f"{NAME}: seeds {first_seed}-{first_seed + seeds - 1} are a part: not recorded alone; "
            "record the parts' raw files together: python -m bench.search_efficiency record "
            "bench/results/search_efficiency-A.json bench/results/search_efficiency-B.json ...",
            flush=True,
        )
    elif docs:
        record(summaries, time.strftime("%Y-%m-%d"))
    return ok


def summary_text(low: int, high: int, optuna: bool) -> str:
    """The paragraph above the docs table (`low`..`high`: the objectives' seed counts)."""
    over = f"{low} seeds" if low == high else f"{low}-{high} seeds (each objective's row says)"
    return (
        f"Best validation metric (minimised) versus training budget, median over {over}, "
        f"{WORKERS} workers, budget B = {RANDOM_TRIALS} full-length trainings, simulated in "
        "virtual time by `bench/_searchsim.py` (cost = batches "
        "trained, promoted trials resume and pay only the added batches, results fed back "
        "asynchronously). Objectives: mf-prior-bench's multi-fidelity Hartmann 3/6 in its "
        "noise presets (max_length 100 = z_max) and the digits MLP (validation loss, "
        "max_length 150, learning rate decayed to 0 over it by a cosine schedule). detlab "
        "`random` and `adaptive_asha` (divisor "
        f"{DIVISOR}, max_rungs {MAX_RUNGS}, mode standard; with model-based proposals, "
        "`sampler: gp`, which the targets judge, and for reference with `sampler: tpe` and "
        "the default `sampler: random`, Determined's uniform proposals) against Optuna "
        + (
            "SuccessiveHalvingPruner / HyperbandPruner (reduction factor "
            f"{DIVISOR}, reports at ASHA's rungs), each with RandomSampler and with Optuna's "
            "default TPESampler; the best of the four is the one compared"
            if optuna
            else "(skipped: not importable)"
        )
        + ". Makespan: the same ASHA experiment (default sampler random, "
        f"max_concurrent_trials {WORKERS}) run to its end on 1 vs {WORKERS} slots, in "
        "batch-times."
    )


def record(summaries: list[dict], measured: str) -> bool:
    """Keep each objective's latest summary in STORE and publish every stored one as one section.

    All nine objectives take hours on a small machine, so they are measured over several runs
    (and sessions); `bench/results/` is not committed, this small file of medians is. True when
    every target is met on every stored objective.
    """
    store: dict[str, dict] = json.loads(STORE.read_text()) if STORE.exists() else {}
    for s in summaries:
        store[s["objective"]] = {**s, "measured": s.get("measured", measured)}
    order = [setup.name for setup in setups()]
    store = dict(sorted(store.items(), key=lambda kv: order.index(kv[0])))
    STORE.write_text(json.dumps(store, indent=1) + "\n")
    fmt = {setup.name: setup.digits for setup in setups()}
    stored = list(store.values())
    rows = [row for s in stored for row in rows_for(s, fmt.get(s["objective"], ".3f"))]
    counts = [s["seeds"] for s in stored]
    optuna = all(s["best_optuna"] for s in stored)
    missing = [name for name in order if name not in store]
    text = summary_text(min(counts), max(counts), optuna)
    current = searcher_version()
    stale = [s["objective"] for s in stored if s.get("searcher") != current]
    if stale:
        text += (
            f" Measured on an earlier searcher than the current one ({current}): "
            f"{', '.join(stale)}; their figures may not hold now (re-run them)."
        )
    if missing:
        text += (
            f" Not yet measured at this budget: {', '.join(missing)} "
            "(`bench/run.py search_efficiency --objectives ...` adds them)."
        )
    write_section(NAME, text, rows, stamp=provenance(stored))
    return all(x is not False for s in stored for x in verdicts(s).values())


def provenance(stored: list[dict]) -> str:
    """Where an assembled section's figures were measured: its runs' dates and CPUs.

    Why not the machine that writes the section: `record` also runs on machines that measured
    nothing (recording raw files, regenerating the text), and model-based figures depend on the
    CPU they were measured on.
    """
    dates = sorted({s["measured"] for s in stored})  # record() always sets it
    cpus = sorted({s.get("cpu", "CPU not recorded") for s in stored})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return f"Measured {when} on {', '.join(cpus)}; each objective's row gives its run"


def record_files(paths: list[str]) -> bool:
    """Record the raw results of `--no-docs` runs (bench/results/search_efficiency-*.json).

    An objective found in several files is summarised over the union of their seeds, so one
    objective can be measured in parts (`--first-seed`), in several runs or sessions.
    """
    raws = []
    for path in paths:
        raw = json.loads(Path(path).read_text())
        if not isinstance(raw, dict) or not {"summaries", "per_seed"} <= raw.keys():
            raise ValueError(
                f"{path} is not a {NAME} raw results file (it needs 'summaries' and 'per_seed')"
            )
        when = time.strftime("%Y-%m-%d", time.localtime(Path(path).stat().st_mtime))
        raws.append((path, when, raw))
    return record(combine(raws), time.strftime("%Y-%m-%d"))


def combine(raws: list[tuple[str, str, dict]]) -> list[dict]:
    """One summary per objective from raw results given as (path, date measured, raw).

    Parts of one objective must come from the same searcher; a seed found in two parts must
    have the same results in both (else they were measured differently and must not be mixed).
    The combined summary names every CPU its parts ran on and the latest date.
    """
    parts: dict[str, list[tuple[str, dict, list[dict]]]] = {}
    for path, when, raw in raws:
        for s in raw["summaries"]:
            name = s["objective"]
            summary = {**s, "measured": s.get("measured", when)}
            parts.setdefault(name, []).append((path, summary, raw["per_seed"][name]))
    out = []
    for name, found in parts.items():
        if len(found) == 1:
            out.append(found[0][1])
            continue
        searchers = sorted({str(summary.get("searcher")) for _p, summary, _r in found})
        if len(searchers) > 1:
            raise ValueError(
                f"{name}: the files were measured on different searchers ({', '.join(searchers)});"
                " record the newer one alone"
            )
        seeds: dict[int, tuple[str, dict]] = {}
        for path, _summary, results in found:
            for result in results:
                seen = seeds.get(result["seed"])
                if seen is not None and seen[1] != result:
                    raise ValueError(
                        f"{name}: seed {result['seed']} is in {seen[0]} and {path} with different "
                        "results (another CPU or code?); record one of them"
                    )
                seeds[result["seed"]] = (path, result)
        setup = next((s for s in setups() if s.name == name), None)
        if setup is None:
            raise ValueError(f"unknown objective {name!r} in {found[0][0]}")
        summary = summarise(setup, [r for _seed, (_p, r) in sorted(seeds.items())], None)
        first = found[0][1]
        cpus = sorted({str(s.get("cpu", "CPU not recorded")) for _p, s, _r in found})
        summary.update(
            optimum=first["optimum"],
            searcher=first.get("searcher"),
            cpu=" + ".join(cpus),
            measured=max(s["measured"] for _p, s, _r in found),
        )
        out.append(summary)
    return out


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["record"] or len(sys.argv) < 3:
        sys.exit("usage: python -m bench.search_efficiency record RESULTS.json [RESULTS.json ...]")
    try:
        met = record_files(sys.argv[2:])
    except (OSError, ValueError) as e:  # a missing, unreadable, foreign or mismatched file
        sys.exit(f"record: nothing recorded: {type(e).__name__}: {e}")
    sys.exit(0 if met else 1)
