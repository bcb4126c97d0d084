"""`preview`: the closed-form summary behind `det experiment preview-search`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detlab.expconf import (
    ConfigError,
    load_stored,
    parse_experiment_config,
    validate_experiment_config,
)
from master.searcher import AdaptiveASHASearch, ValidateAfter
from master.searcher.preview import preview as preview_of
from tests.unit.test_searcher_properties import simulate

HP = {
    "lr": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 3},
    "opt": {"type": "categorical", "vals": ["a", "b"]},
}


def raw(**searcher: Any) -> dict:
    s: dict[str, Any] = {"metric": "loss", "max_length": {"batches": 100}}
    s.update(searcher)
    return {"entrypoint": "python3 train.py", "hyperparameters": HP, "searcher": s}


def preview(raw: dict) -> dict[str, Any]:
    """The preview of a user's config, as the API computes it (parsed once, then typed)."""
    return preview_of(parse_experiment_config(raw))


def test_single() -> None:
    assert preview(raw(name="single")) == {
        "searcher": "single",
        "unit": "batches",
        "trials": 1,
        "total_length": 100,
        "rungs": [{"length": 100, "trials": 1}],
    }


def test_random_in_epochs() -> None:
    cfg = raw(name="random", max_trials=7, max_length={"epochs": 2})
    cfg["records_per_epoch"] = 10
    out = preview(cfg)
    assert out["unit"] == "epochs"
    assert out["trials"] == 7 and out["total_length"] == 14
    assert out["rungs"] == [{"length": 2, "trials": 7}]


def test_grid() -> None:
    out = preview(raw(name="grid"))
    assert out["grid_size"] == 6 and out["trials"] == 6 and out["total_length"] == 600


def test_grid_capped_by_max_trials() -> None:
    out = preview(raw(name="grid", max_trials=4))
    assert out["grid_size"] == 6 and out["trials"] == 4


def test_accepts_stored_configs() -> None:
    cfg = raw(name="random", max_trials=3)
    assert preview_of(load_stored(validate_experiment_config(cfg))) == preview(cfg)


def test_invalid_config_raises() -> None:
    with pytest.raises(ConfigError):
        preview(raw(name="random"))  # random needs max_trials


def test_asha_single_bracket() -> None:
    out = preview(
        raw(name="adaptive_asha", max_trials=16, divisor=2, mode="aggressive", max_rungs=3)
    )
    assert out["searcher"] == "adaptive_asha"
    assert out["trials"] == 16
    assert out["rungs"] == [
        {"length": 25, "trials": 16},
        {"length": 50, "trials": 8},
        {"length": 100, "trials": 4},
    ]
    assert out["total_length"] == 16 * 25 + 8 * 25 + 4 * 50
    assert "brackets" not in out
    json.dumps(out, allow_nan=False)


def test_asha_several_brackets() -> None:
    out = preview(
        raw(
            name="adaptive_asha",
            max_length={"batches": 1000},
            max_trials=100,
            mode="standard",
        )
    )
    brackets = out["brackets"]
    assert [b["num_rungs"] for b in brackets] == [4, 3, 2]
    assert sum(b["trials"] for b in brackets) == out["trials"] == 100
    first = brackets[0]["rungs"]
    assert [r["length"] for r in first] == [15, 62, 250, 1000]
    n = brackets[0]["trials"]
    assert [r["trials"] for r in first] == [n, n // 4, n // 16, n // 64]
    by_length: dict[int, int] = {}
    for b in brackets:
        for r in b["rungs"]:
            by_length[r["length"]] = by_length.get(r["length"], 0) + r["trials"]
    assert out["rungs"] == [{"length": k, "trials": by_length[k]} for k in sorted(by_length)]


def test_asha_time_form() -> None:
    out = preview(
        raw(
            name="adaptive_asha",
            max_length=None,
            time_metric="batches",
            max_time=64,
            max_trials=8,
            divisor=2,
            mode="aggressive",
        )
    )
    assert out["time_metric"] == "batches"
    assert out["rungs"][0] == {"length": 8, "trials": 8}
    assert out["rungs"][-1]["length"] == 64
    # Stopping keeps at least floor(n / divisor) trials going at each rung.
    counts = [r["trials"] for r in out["rungs"]]
    assert all(b >= a // 2 and b <= a for a, b in zip(counts, counts[1:], strict=False))


@settings(max_examples=15, deadline=None)
@given(
    max_trials=st.integers(1, 20),
    divisor=st.sampled_from([2.0, 3.0, 4.0]),
    mode=st.sampled_from(["aggressive", "standard", "conservative"]),
    max_length=st.integers(1, 200),
    seed=st.integers(0, 2**32),
)
def test_property_asha_preview_matches_a_run_without_failures(
    max_trials: int, divisor: float, mode: str, max_length: int, seed: int
) -> None:
    p = {
        "smaller": True,
        "concurrent": 3,
        "max_length": max_length,
        "max_trials": max_trials,
        "grid_cap": None,
        "divisor": divisor,
        "max_rungs": 5,
        "mode": mode,
        "bracket_rungs": None,
    }
    sim = simulate("asha", p, seed, seed, (0.0, 0.0, 0.0))
    out = preview_of(sim.config)
    assert isinstance(sim.searcher, AdaptiveASHASearch)
    reached: dict[int, int] = {}
    for t in sim.trials.values():
        assert t.bracket is not None
        for length in sim.searcher.brackets[t.bracket].lengths:
            if t.completed >= length:
                reached[length] = reached.get(length, 0) + 1
    assert {r["length"]: r["trials"] for r in out["rungs"] if r["trials"]} == reached
    assert out["total_length"] == sum(t.completed for t in sim.trials.values())
    assert out["trials"] == len(sim.trials) == max_trials
    # The op trace trains exactly to those lengths.
    assert max(op.length for op in sim.trace if isinstance(op, ValidateAfter)) <= max_length
