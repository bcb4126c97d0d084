"""search_efficiency keeps the latest summary per objective and publishes all of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import _report, search_efficiency
from bench.search_efficiency import METHODS, paired, record


def summary(objective: str, asha_at_b: float, seeds: int = 10) -> dict:
    curve = [-1.0, -2.0, -3.0, -3.5]
    return {
        "objective": objective,
        "seeds": seeds,
        "budget": 20_000,
        "random_trials": 200,
        "rungs": [3, 11, 33, 100],
        "optimum": -3.86278,
        "median_best_at": {m: [*curve, -3.6] for m in METHODS} | {"asha": [*curve, asha_at_b]},
        "median_trials": {m: 200 for m in METHODS},
        "asha_fraction_to_random_final": 0.2,
        "asha_fraction_reached": 8,
        "asha_random_fraction_to_random_final": 0.4,
        "asha_tpe_fraction_to_random_final": 0.3,
        "best_optuna": "optuna_sh",
        "makespan_1": 8000.0,
        "makespan_8": 1000.0,
        "speedup": 8.0,
        "natural_budget": 20_000.0,
        "natural_best_1": -3.7,
        "natural_best_8": -3.7,
    }


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    store, docs = tmp_path / "store.json", tmp_path / "benchmarks.md"
    monkeypatch.setattr(search_efficiency, "STORE", store)
    monkeypatch.setattr(_report, "DOCS", docs)
    monkeypatch.setattr(_report, "machine", lambda: "test machine")
    return store, docs


def test_runs_add_objectives_and_the_latest_run_of_one_wins(files: tuple[Path, Path]) -> None:
    store, docs = files
    assert record([summary("mfh6_terrible", -3.7)], "2026-11-22") is True
    assert record([summary("mfh3_terrible", -3.7)], "2026-11-23") is True
    # A later run of mfh6_terrible replaces its entry; its missed target makes the whole False.
    assert record([summary("mfh6_terrible", -3.0)], "2026-11-24") is False

    stored = json.loads(store.read_text())
    assert list(stored) == ["mfh3_terrible", "mfh6_terrible"]  # the objectives' own order
    assert stored["mfh6_terrible"]["measured"] == "2026-11-24"
    text = docs.read_text()
    assert text.count("<!-- bench:search_efficiency:start -->") == 1
    assert "median of 10 seeds, measured 2026-11-23" in text
    assert "-3.000 vs -3.600 (Optuna SuccessiveHalving + random) (MISSED)" in text
    assert "Not yet measured at this budget: mfh3_good," in text
    assert "digits_mlp" in text.split("Not yet measured")[1]


def test_the_recommended_configurations_row_shows_where_it_was_measured(
    files: tuple[Path, Path],
) -> None:
    _store, docs = files
    recommended = {m: 0.13 for m in METHODS} | {"asha": 0.125, "optuna_hb_tpe": 0.128}
    record(
        [summary("digits_mlp", 0.1, seeds=10) | {"median_recommended": recommended}], "2026-11-26"
    )
    record([summary("mfh3_good", -3.7)], "2026-11-22")  # stored before the figure existed
    text = docs.read_text()
    rows = [line for line in text.splitlines() if "expected metric of the best trial" in line]
    assert len(rows) == 1 and rows[0].startswith("| digits_mlp at B: expected metric")
    assert "0.1250 vs 0.1280 (Optuna Hyperband + TPE)" in rows[0]
    assert "random search 0.1300" in rows[0]
    assert "not a target: the mean validation loss over 32 fresh trial seeds" in rows[0]


def test_paired_compares_two_methods_seed_by_seed() -> None:
    def seed(a: float, b: float) -> dict:
        return {"best_at": {"asha": [9.0, a], "optuna_sh": [9.0, b]}}

    seeds = [seed(0.10, 0.11), seed(0.12, 0.11), seed(0.09, 0.10), seed(float("inf"), 0.1)]
    p = paired(seeds, "asha", "optuna_sh")
    assert p is not None
    assert (p["ahead"], p["seeds"]) == (2, 3)  # the seed without an ASHA result is left out
    assert p["mean_difference"] == pytest.approx(-0.01 / 3)
    assert p["standard_error"] == pytest.approx(0.02 / 3)  # stdev 0.01155 / sqrt(3)
    assert paired([seed(float("inf"), 0.1)], "asha", "optuna_sh") is None


def test_the_at_b_row_gives_the_per_seed_comparison_where_stored(files: tuple[Path, Path]) -> None:
    vs = {"ahead": 8, "seeds": 20, "mean_difference": -0.0001, "standard_error": 0.0023}
    record([summary("digits_mlp", 0.1, seeds=20) | {"asha_vs_best_optuna": vs}], "2026-11-26")
    record([summary("mfh3_good", -3.7)], "2026-11-22")  # stored before the comparison existed
    rows = [line for line in files[1].read_text().splitlines() if "ASHA vs best Optuna" in line]
    digits, mfh3 = (
        next(r for r in rows if r.startswith(f"| {o} at B: ASHA"))
        for o in ("digits_mlp", "mfh3_good")
    )
    assert "per seed: ASHA ahead on 8/20, mean difference -0.0001 (standard error 0.0023)" in digits
    assert "per seed" not in mfh3


def test_the_paragraph_gives_the_range_of_seed_counts(files: tuple[Path, Path]) -> None:
    _store, docs = files
    record([summary("mfh3_good", -3.7)], "2026-11-22")
    assert "median over 10 seeds," in docs.read_text()
    record([summary("digits_mlp", -3.7, seeds=20)], "2026-11-23")
    text = docs.read_text()
    assert "median over 10-20 seeds (each objective's row says)," in text
    assert "median of 20 seeds, measured 2026-11-23" in text


def test_objectives_measured_on_an_earlier_searcher_are_named(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, docs = files
    monkeypatch.setattr(search_efficiency, "searcher_version", lambda: "bbbb222")
    record([summary("mfh3_good", -3.7) | {"searcher": "aaaa111"}], "2026-11-22")
    record([summary("mfh6_good", -3.7) | {"searcher": "bbbb222"}], "2026-11-23")
    record([summary("mfh3_bad", -3.7)], "2026-11-23")  # stored before versions were recorded
    text = docs.read_text()
    assert "measured 2026-11-22 on searcher aaaa111" in text
    assert "AVX-512" not in text  # no CPU stored, none shown
    assert (
        "Measured on an earlier searcher than the current one (bbbb222): mfh3_good, mfh3_bad;"
        in text
    )
    assert "mfh6_good" not in text.split("earlier searcher")[1].split(";")[0]
    assert json.loads(store.read_text())["mfh6_good"]["searcher"] == "bbbb222"


def test_the_searcher_version_is_the_last_commit_that_changed_it() -> None:
    version = search_efficiency.searcher_version()
    assert re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?", version), version


def test_each_objective_shows_the_cpu_it_was_measured_on(files: tuple[Path, Path]) -> None:
    record([summary("mfh3_good", -3.7) | {"cpu": "AMD EPYC (with AVX-512)"}], "2026-11-25")
    record([summary("mfh3_bad", -3.7) | {"cpu": "AMD EPYC (no AVX-512)"}], "2026-11-25")
    text = files[1].read_text()
    assert re.search(r"\*\*mfh3_good\*\* budget B .*, AMD EPYC \(with AVX-512\) \|", text)
    assert re.search(r"\*\*mfh3_bad\*\* budget B .*, AMD EPYC \(no AVX-512\) \|", text)


def test_the_section_stamp_names_the_measuring_runs_not_this_machine(
    files: tuple[Path, Path],
) -> None:
    record([summary("mfh3_good", -3.7) | {"cpu": "AMD EPYC (no AVX-512)"}], "2026-11-24")
    record([summary("mfh3_bad", -3.7) | {"cpu": "AMD EPYC (with AVX-512)"}], "2026-11-25")
    record([], "2026-11-26")  # regenerated elsewhere: nothing new measured
    text = files[1].read_text()
    stamp = (
        "_Measured 2026-11-24 to 2026-11-25 on AMD EPYC (no AVX-512), AMD EPYC (with AVX-512); "
        "each objective's row gives its run_"
    )
    assert stamp in text
    assert "test machine" not in text  # the fixture's stand-in for where record() runs


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("fpu sse2 avx2 avx512f avx512dq", "EPYC 9B14 (with AVX-512)"),
        ("fpu sse2 avx2", "EPYC 9B14 (no AVX-512)"),
    ],
)
def test_the_cpu_line_names_the_model_and_avx512(tmp_path: Path, flags: str, expected: str) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        f"processor\t: 0\nmodel name\t: EPYC 9B14\nflags\t\t: {flags}\n\n"
        f"processor\t: 1\nmodel name\t: EPYC 9B14\nflags\t\t: {flags}\n"
    )
    assert _report.cpu(info) == expected


def seed_result(seed: int, asha: float, optuna: float) -> dict:
    """One seed of a raw search_efficiency file (every method at `optuna` but ASHA)."""
    best = {m: [1.0, 0.8, 0.6, 0.5, optuna] for m in METHODS} | {"asha": [1.0, 0.8, 0.6, 0.5, asha]}
    return {
        "seed": seed,
        "budget": 30_000,
        "rungs": [5, 16, 50, 150],
        "best_at": best,
        "trials": {m: 200 for m in METHODS},
        "recommended": {m: optuna + 0.03 for m in METHODS} | {"asha": asha + 0.03},
        "asha_to_random_final": 0.2,
        "asha_random_to_random_final": 0.3,
        "asha_tpe_to_random_final": 0.3,
        "asha_natural": {
            "trials": 981,
            "budget_used": 30_000.0,
            "makespan_1": 30_000.0,
            "makespan_8": 3_900.0,
            "best_1": 0.11,
            "best_8": 0.11,
            "shutdown": True,
        },
    }


def raw_file(tmp_path: Path, name: str, results: list[dict], **summary: object) -> Path:
    head = {"objective": "digits_mlp", "optimum": None, "searcher": "abc1234", "cpu": "CPU A"}
    raw = {"summaries": [head | summary], "per_seed": {"digits_mlp": results}}
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


def test_parts_of_one_objective_are_recorded_over_the_union_of_their_seeds(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    store, docs = files
    a = raw_file(tmp_path, "a.json", [seed_result(0, 0.10, 0.11), seed_result(1, 0.12, 0.11)])
    b = raw_file(
        tmp_path,
        "b.json",
        [seed_result(1, 0.12, 0.11), seed_result(2, 0.09, 0.10), seed_result(3, 0.13, 0.10)],
        cpu="CPU B",
    )
    search_efficiency.record_files([str(a), str(b)])
    stored = json.loads(store.read_text())["digits_mlp"]
    assert stored["seeds"] == 4  # seed 1, in both with the same results, counted once
    assert stored["median_best_at"]["asha"][-1] == pytest.approx(0.11)  # of .10 .12 .09 .13
    assert stored["median_best_at"]["optuna_sh"][-1] == pytest.approx(0.105)
    assert stored["asha_vs_best_optuna"]["ahead"] == 2
    assert stored["median_recommended"]["asha"] == pytest.approx(0.14)
    assert stored["cpu"] == "CPU A + CPU B" and stored["searcher"] == "abc1234"
    assert "median of 4 seeds" in docs.read_text()


def test_a_file_that_is_not_raw_results_is_refused_by_name(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    store, _docs = files
    other = tmp_path / "other.json"
    other.write_text('{"rows": []}')
    with pytest.raises(ValueError, match=r"other\.json is not a search_efficiency raw results"):
        search_efficiency.record_files([str(other)])
    assert not store.exists()  # nothing recorded


def test_parts_that_disagree_are_not_mixed(tmp_path: Path) -> None:
    def parts(*paths: Path) -> list[tuple[str, str, dict]]:
        return [(str(p), "2026-11-26", json.loads(p.read_text())) for p in paths]

    a = raw_file(tmp_path, "a.json", [seed_result(0, 0.10, 0.11)])
    other_searcher = raw_file(tmp_path, "b.json", [seed_result(1, 0.1, 0.1)], searcher="def5678")
    with pytest.raises(ValueError, match=r"different searchers \(abc1234, def5678\)"):
        search_efficiency.combine(parts(a, other_searcher))
    other_result = raw_file(tmp_path, "c.json", [seed_result(0, 0.105, 0.11)])
    with pytest.raises(ValueError, match=r"seed 0 is in .*a\.json and .*c\.json with different"):
        search_efficiency.combine(parts(a, other_result))


def test_a_seed_range_runs_for_real_and_a_part_is_not_recorded_alone(
    files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small real run: every detlab method on seeds 3-4 of 3-D Hartmann at a tiny budget."""
    pytest.importorskip("optuna")
    from bench.objectives.hartmann import OPTIMUM, MFHartmann

    store, docs = files
    small = search_efficiency.Setup(
        "mfh3_good", lambda seed: MFHartmann(3, "good", seed=seed), random_trials=6, asha_trials=30
    )
    monkeypatch.setattr(search_efficiency, "setups", lambda: [small])  # inherited by the pool
    monkeypatch.setattr(_report, "RESULTS", tmp_path / "results")
    search_efficiency.run(seeds=2, objectives=["mfh3_good"], optuna=False, first_seed=3)
    assert not store.exists() and not docs.exists()  # a part: recorded with the other parts
    (raw_path,) = (tmp_path / "results").iterdir()
    raw = json.loads(raw_path.read_text())
    per_seed = raw["per_seed"]["mfh3_good"]
    assert [s["seed"] for s in per_seed] == [3, 4]
    for s in per_seed:
        assert set(s["recommended"]) == {"random", "asha", "asha_tpe", "asha_random"}
        for method, value in s["recommended"].items():
            # The best trial's configuration, noise-free at full fidelity: never worse than the
            # (biased, noisy) value the search observed for it, never better than the optimum.
            assert OPTIMUM[3] - 1e-5 <= value <= s["best_at"][method][-1] + 1e-9
    (summary,) = raw["summaries"]
    assert summary["seeds"] == 2 and summary["best_optuna"] is None
    assert summary["median_recommended"]["asha"] == pytest.approx(
        search_efficiency.median([s["recommended"]["asha"] for s in per_seed])
    )
