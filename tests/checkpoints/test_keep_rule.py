"""Table tests of the GC keep rule against Determined's documented example.

Two trials, ten checkpoints (smaller is better); checkpoints 1, 2, 9, 10 have no validation:

| trial | checkpoint | metric |      | trial | checkpoint | metric |
| 1     | 1          | -      |      | 2     | 6          | 0.4    |
| 1     | 2          | -      |      | 2     | 7          | 0.2    |
| 1     | 3          | 0.6    |      | 2     | 8          | 0.3    |
| 1     | 4          | 0.5    |      | 2     | 9          | -      |
| 1     | 5          | 0.6    |      | 2     | 10         | -      |
"""

from __future__ import annotations

import time

import pytest

from master.ckpt.policy import Candidate, Policy, plan

METRICS = {1: None, 2: None, 3: 0.6, 4: 0.5, 5: 0.6, 6: 0.4, 7: 0.2, 8: 0.3, 9: None, 10: None}


def _cands(protected: set[int] = frozenset()) -> list[Candidate]:  # type: ignore[assignment]
    return [
        Candidate(
            uuid=str(i),
            trial_id=1 if i <= 5 else 2,
            order=float(i),
            metric=METRICS[i],
            protected=i in protected,
            size=i * 100,
        )
        for i in METRICS
    ]


@pytest.mark.parametrize(
    ("exp_best", "trial_best", "trial_latest", "kept"),
    [
        (0, 0, 0, set()),
        (2, 0, 0, {7, 8}),
        (0, 1, 0, {4, 7}),
        (0, 0, 1, {5, 10}),
        (2, 1, 0, {4, 7, 8}),
        (2, 0, 1, {5, 7, 8, 10}),
        (0, 1, 1, {4, 5, 7, 10}),  # Determined's defaults
        (2, 1, 1, {4, 5, 7, 8, 10}),
        (0, 0, 3, {3, 4, 5, 8, 9, 10}),
        (0, 5, 0, {3, 4, 5, 6, 7, 8}),  # only checkpoints with a validation are ever "best"
        (100, 100, 100, set(METRICS)),
    ],
)
def test_determined_documented_policies(
    exp_best: int, trial_best: int, trial_latest: int, kept: set[int]
) -> None:
    p = plan(_cands(), Policy(exp_best, trial_best, trial_latest), smaller_is_better=True)
    assert {int(u) for u in p.keep} == kept
    assert [int(u) for u in p.delete] == sorted(set(METRICS) - kept)  # oldest first
    assert p.bytes_freed == sum(i * 100 for i in set(METRICS) - kept)


def test_larger_is_better_flips_best() -> None:
    p = plan(_cands(), Policy(1, 1, 0), smaller_is_better=False)
    # 3 and 5 tie at 0.6 (the best of both trials): the newer one, 5, wins.
    assert {int(u) for u in p.keep} == {5, 6}
    assert set(p.keep["5"]) == {"experiment best", "trial best"}
    assert p.keep["6"] == ["trial best"]


def test_protected_checkpoints_are_always_kept() -> None:
    p = plan(_cands(protected={1, 6}), Policy(0, 0, 0))
    assert {int(u) for u in p.keep} == {1, 6}
    assert p.keep["1"] == ["protected"]


def test_reasons_are_recorded() -> None:
    p = plan(_cands(), Policy(2, 1, 1))
    assert set(p.keep["7"]) == {"experiment best", "trial best"}
    assert p.keep["10"] == ["trial latest"]


def test_nan_metric_is_no_validation() -> None:
    c = [Candidate("a", 1, 1.0, float("nan")), Candidate("b", 1, 2.0, None)]
    p = plan(c, Policy(0, 1, 0))
    assert p.keep == {} and p.delete == ["a", "b"]


def test_policy_from_storage_defaults() -> None:
    assert Policy.from_storage({}) == Policy(0, 1, 1)
    assert Policy.from_storage({"save_trial_best": 3, "save_trial_latest": None}) == Policy(0, 3, 1)


def test_ten_thousand_checkpoints_plan_fast() -> None:
    """The benchmark's size, here only as a sanity bound far above the 1 s target."""
    cands = [
        Candidate(f"u{i}", i % 100, float(i), (i * 7919 % 1000) / 1000 if i % 3 else None)
        for i in range(10_000)
    ]
    t = time.perf_counter()
    p = plan(cands, Policy(5, 1, 1))
    assert time.perf_counter() - t < 10
    assert len(p.keep) <= 5 + 100 + 100 and len(p.keep) + len(p.delete) == 10_000
