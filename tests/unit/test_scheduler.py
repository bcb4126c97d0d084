"""The scheduler's basics, through `schedule` and the master's original `schedule_priority`."""

from __future__ import annotations

import pytest

from master.scheduler import (
    AgentView,
    Decision,
    PoolPolicy,
    Request,
    Running,
    queue_order,
    schedule,
    schedule_priority,
)

PRIORITY = PoolPolicy()


def agent(
    aid: str, free: tuple[int, ...], total: int | None = None, pool: str = "default"
) -> AgentView:
    return AgentView(aid, pool, free, total if total is not None else len(free))


def req(rid: str, slots: int = 1, priority: int = 42, order: float = 0.0, **kw) -> Request:  # type: ignore[no-untyped-def]
    return Request(rid, kw.pop("job", rid), slots, priority, order, **kw)


def placements(decision: Decision) -> dict[str, tuple]:
    return {a.request_id: a.placements for a in decision.assignments}


# -- schedule_priority (the master's entry point until it calls schedule) ----------------------


def test_legacy_priority_then_fifo() -> None:
    reqs = [Request("late", "", 1, 42, 2.0), Request("early", "", 1, 42, 1.0)]
    reqs.append(Request("urgent", "", 1, 1, 3.0))
    d = schedule_priority(reqs, [agent("a", (0, 1))])
    assert set(placements(d)) == {"urgent", "early"}
    assert d.waiting == {"late": "waiting for 1 free slot(s)"}


def test_legacy_keyword_construction_still_works() -> None:
    # master/services/queue/scheduling.py builds requests by keyword, without job_id
    r = Request(id="7", slots=2, priority=42, order=1.0, pool="default", weight=1.0)
    d = schedule_priority([r], [agent("a", (0, 1))])
    assert placements(d) == {"7": (("a", (0, 1)),)}


def test_legacy_gang_stays_on_one_agent() -> None:
    d = schedule_priority([Request("big", "", 2)], [agent("a", (0,), 2), agent("b", (1,), 2)])
    assert not d.assignments and "waiting for 2" in d.waiting["big"]
    d = schedule_priority([Request("big", "", 2)], [agent("a", (0,), 2), agent("b", (0, 1))])
    assert placements(d) == {"big": (("b", (0, 1)),)}


def test_legacy_never_fits_and_pools() -> None:
    d = schedule_priority([Request("huge", "", 8)], [agent("a", (0, 1))])
    assert "largest agent" in d.waiting["huge"] and "has 2" in d.waiting["huge"]
    d = schedule_priority([Request("r", "", 1, pool="gpu")], [agent("a", (0,), pool="cpu")])
    assert d.waiting["r"] == "no agents in resource pool 'gpu'"


# -- schedule: table of simple cases --------------------------------------------------------

CASES = [
    # (name, requests, agents, expected placements, expected waiting reasons)
    (
        "priority before FIFO",
        [req("late", order=2), req("early", order=1), req("urgent", priority=1, order=3)],
        [agent("a", (0, 1))],
        {"urgent": (("a", (0,)),), "early": (("a", (1,)),)},
        {"late": "waiting for 1 free slot(s)"},
    ),
    (
        "FIFO ties broken by id",
        [req("b"), req("a")],
        [agent("x", (0,))],
        {"a": (("x", (0,)),)},
        {"b": "waiting for 1 free slot(s)"},
    ),
    (
        "manual queue position (order) beats submission",
        [req("first", order=10.0), req("moved-ahead", order=0.5)],
        [agent("x", (0,))],
        {"moved-ahead": (("x", (0,)),)},
        {"first": "waiting for 1 free slot(s)"},
    ),
    (
        "gang on one agent when one has room",
        [req("g", 2)],
        [agent("a", (0,), 2), agent("b", (0, 1))],
        {"g": (("b", (0, 1)),)},
        {},
    ),
    (
        "gang spans agents when none has room alone",
        [req("g", 3)],
        [agent("a", (0, 1), 2), agent("b", (1,), 2)],
        {"g": (("a", (0, 1)), ("b", (1,)))},
        {},
    ),
    (
        "gang that cannot be placed even spanning waits",
        [req("g", 4)],
        [agent("a", (0, 1), 2), agent("b", (1,), 2)],
        {},
        {"g": "waiting for 4 free slot(s)"},
    ),
    (
        "never fits the pool: says so",
        [req("huge", 8)],
        [agent("a", (0, 1)), agent("b", (0, 1))],
        {},
        {"huge": "needs 8 slots; the pool has 4 in all"},
    ),
    (
        "smaller request backfills behind a blocked one",
        [req("big", 2, order=1), req("small", 1, order=2)],
        [agent("a", (0,), 2)],
        {"small": (("a", (0,)),)},
        {"big": "waiting for 2 free slot(s)"},
    ),
    (
        "zero-slot request runs on the emptiest agent",
        [req("z", 0)],
        [agent("full", (), 2), agent("roomy", (0, 1))],
        {"z": (("roomy", ()),)},
        {},
    ),
    (
        "zero-slot request runs even on a full pool",
        [req("z", 0)],
        [agent("full", (), 2)],
        {"z": (("full", ()),)},
        {},
    ),
    ("no agents", [req("r")], [], {}, {"r": "no agents in resource pool 'default'"}),
    (
        "job at its max_slots",
        [req("t1", job="3", max_slots=2), req("t2", job="3", max_slots=2, order=1)],
        [agent("a", (0, 1, 2, 3))],
        {"t1": (("a", (0,)),), "t2": (("a", (1,)),)},
        {},
    ),
    (
        "job over its max_slots waits",
        [req(f"t{i}", 2, job="3", max_slots=4, order=i) for i in range(3)],
        [agent("a", tuple(range(8)))],
        {"t0": (("a", (0, 1)),), "t1": (("a", (2, 3)),)},
        {"t2": "job 3 is at its max_slots (4)"},
    ),
    (
        "trial bigger than its job's max_slots never fits",
        [req("t", 4, job="3", max_slots=2)],
        [agent("a", tuple(range(8)))],
        {},
        {"t": "needs 4 slots; job 3's max_slots is 2"},
    ),
]


def _params() -> list:  # type: ignore[type-arg]
    out = []
    for name, *case in CASES:
        out.append(pytest.param("priority", *case, id=f"priority: {name}"))
        if all(r.priority == 42 for r in case[0]):  # fair share ignores priorities
            out.append(pytest.param("fair_share", *case, id=f"fair_share: {name}"))
    return out


@pytest.mark.parametrize("policy_type,requests,agents,expected,waiting", _params())
def test_simple_cases(policy_type, requests, agents, expected, waiting) -> None:  # type: ignore[no-untyped-def]
    d = schedule(PoolPolicy(policy_type), requests, [], agents)
    if policy_type == "priority":
        assert placements(d) == expected
        assert d.waiting == waiting
    else:  # same who-runs; reasons may say more
        assert set(placements(d)) == set(expected)
        for rid, why in waiting.items():
            assert d.waiting[rid].startswith(why)
    assert d.preemptions == []


def test_max_slots_counts_running_trials() -> None:
    running = [Running("old", "3", (("a", (0, 1)),), max_slots=3)]
    d = schedule(PRIORITY, [req("new", 2, job="3", max_slots=3)], running, [agent("a", (2, 3), 4)])
    assert d.waiting == {"new": "job 3 is at its max_slots (3)"}


def test_bad_policy_is_rejected() -> None:
    with pytest.raises(ValueError):
        schedule(PoolPolicy("lottery"), [], [], [])
    with pytest.raises(ValueError):
        schedule(PoolPolicy(fitting_policy="first"), [], [], [])


def test_queue_order_priority_then_fifo_with_running_jobs() -> None:
    reqs = [
        req("t1", job="1", order=1),
        req("t2", job="2", priority=10, order=2),
        req("t3", job="3", order=0.5),
    ]
    running = [Running("r4", "4", (("a", (0,)),), priority=80, order=0.1)]
    assert queue_order(reqs, running) == ["2", "3", "1", "4"]


def test_queue_order_fair_share_least_served_first() -> None:
    reqs = [req("t1", job="1", order=1), req("t2", job="2", order=2)]
    running = [Running("r1", "1", (("a", (0, 1)),), order=1)]
    assert queue_order(reqs, running, PoolPolicy("fair_share")) == ["2", "1"]
