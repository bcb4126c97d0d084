"""SlotIndex: where a gang of N slots fits (best / worst fit, spanning agents)."""

from __future__ import annotations

import pytest

from master.scheduler import SlotIndex


def index(**free: int) -> SlotIndex:
    ix = SlotIndex(8)
    for agent_id, n in free.items():
        ix.add_agent(agent_id, range(n))
    return ix


@pytest.mark.parametrize(
    "free,n,worst,expected",
    [
        ({"a": 4, "b": 1, "c": 2}, 1, False, [("b", 1)]),  # tightest
        ({"a": 4, "b": 1, "c": 2}, 1, True, [("a", 1)]),  # emptiest
        ({"a": 4, "b": 1, "c": 2}, 2, False, [("c", 2)]),
        ({"a": 4, "b": 1, "c": 2}, 4, False, [("a", 4)]),  # exact fit, nothing spans
        ({"a": 4, "b": 1, "c": 2}, 5, False, [("a", 4), ("b", 1)]),  # span: tightest last share
        ({"a": 4, "b": 1, "c": 2}, 5, True, [("a", 4), ("c", 1)]),  # span: emptiest agents
        ({"a": 4, "b": 1, "c": 2}, 7, False, [("a", 4), ("c", 2), ("b", 1)]),
        ({"a": 4, "b": 1, "c": 2}, 8, False, None),  # more than the pool has free
        ({"a": 3, "b": 3, "c": 3, "d": 1}, 4, False, [("a", 3), ("d", 1)]),  # 2 agents, not 3
        ({"a": 3, "b": 3, "c": 3, "d": 1}, 4, True, [("a", 3), ("b", 1)]),
        ({"a": 2, "b": 2, "c": 2}, 6, False, [("a", 2), ("b", 2), ("c", 2)]),
        ({"a": 0, "b": 0}, 1, False, None),
        ({}, 1, False, None),
    ],
)
def test_fit(free: dict[str, int], n: int, worst: bool, expected: list | None) -> None:
    assert index(**free).fit(n, worst=worst) == expected


def test_no_spanning_when_not_allowed() -> None:
    ix = index(a=2, b=2)
    assert ix.fit(3, span=False) is None
    assert ix.fit(2, span=False) == [("a", 2)]


def test_spanning_uses_as_few_agents_as_possible() -> None:
    ix = index(**{f"s{i}": 1 for i in range(6)}, big=5, mid=3)
    fit = ix.fit(8)
    assert fit == [("big", 5), ("mid", 3)]


def test_take_add_remove_keep_counts_and_buckets_in_step() -> None:
    ix = index(a=4, b=2)
    assert ix.take("a", 3) == (0, 1, 2)
    assert ix.count("a") == 1 and ix.total == 3
    assert ix.fit(2) == [("b", 2)]
    ix.remove("b", (0, 7))  # 7 is not there: ignored
    assert ix.slots["b"] == [1] and ix.total == 2
    assert ix.add("a", (0, 3, 1)) == [0, 1]  # 3 is already free
    assert ix.slots["a"] == [0, 1, 3] and ix.total == 4
    assert ix.fit(3) == [("a", 3)]
    assert ix.most_free() == "a"
    assert ix.add("unknown", (0,)) == []


def test_take_more_than_free_is_a_bug() -> None:
    ix = index(a=1)
    with pytest.raises(AssertionError):
        ix.take("a", 2)
