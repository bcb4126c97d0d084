"""Preemption choices: priority (strictly lower priority, least work lost) and fair share
(over-share jobs when others wait), plus fair-share allocation itself."""

from __future__ import annotations

import pytest

from master.scheduler import (
    AgentView,
    Decision,
    PoolPolicy,
    Request,
    Running,
    fair_shares,
    schedule,
)

PRIO = PoolPolicy("priority", preemption=True)
FAIR = PoolPolicy("fair_share")
FAIR_P = PoolPolicy("fair_share", preemption=True)


def agent(aid: str, free: tuple[int, ...] = (), total: int = 4) -> AgentView:
    return AgentView(aid, "default", free, total)


def run(rid: str, where: str, slots: tuple[int, ...], job: str = "", **kw) -> Running:  # type: ignore[no-untyped-def]
    return Running(rid, job or rid, ((where, slots),), **kw)


def req(rid: str, slots: int = 1, job: str = "", **kw) -> Request:  # type: ignore[no-untyped-def]
    return Request(rid, job or rid, slots, **kw)


def placed(d: Decision) -> dict[str, tuple]:
    return {a.request_id: a.placements for a in d.assignments}


# -- priority ---------------------------------------------------------------------------------

PRIORITY_CASES = [
    # (name, request, running, agents, expected preemptions (set), reason prefix)
    (
        "strictly lower priority only: equal priority is not preempted",
        req("r", 1, priority=42),
        [run("x", "a", (0, 1, 2, 3), priority=42)],
        [agent("a")],
        set(),
        "waiting for 1 free slot(s); running work has equal or higher priority",
    ),
    (
        "higher-priority running work is never preempted",
        req("r", 1, priority=50),
        [run("x", "a", (0, 1, 2, 3), priority=10)],
        [agent("a")],
        set(),
        "waiting for 1 free slot(s)",
    ),
    (
        "lowest priority first",
        req("r", 1, priority=10),
        [run("p50", "a", (0, 1)), run("p80", "a", (2, 3), priority=80)],
        [agent("a")],
        {"p80"},
        "preempting 1 trial(s) to make room",
    ),
    (
        "then the newest",
        req("r", 1, priority=10),
        [run("old", "a", (0, 1), order=1.0), run("new", "a", (2, 3), order=2.0)],
        [agent("a")],
        {"new"},
        "preempting 1 trial(s)",
    ),
    (
        "only as many as needed, counting free slots",
        req("r", 3, priority=10),
        [run(f"t{i}", "a", (i,), order=float(i)) for i in range(3)],
        [agent("a", (3,))],
        {"t2", "t1"},
        "preempting 2 trial(s)",
    ),
    (
        "no preemption for a request that still could not be placed",
        req("r", 4, priority=10),
        [run("low", "a", (0, 1), priority=80), run("high", "a", (2, 3), priority=1)],
        [agent("a")],
        set(),
        "waiting for 4 free slot(s)",
    ),
    (
        "non-preemptible trials are left alone",
        req("r", 2, priority=10),
        [run("pinned", "a", (0, 1), priority=80, preemptible=False), run("ok", "a", (2, 3))],
        [agent("a")],
        {"ok"},
        "preempting 1 trial(s)",
    ),
    (
        "one big victim rather than many small more valuable ones",
        req("r", 4, priority=1),
        [
            run("s1", "a", (0,), priority=50),
            run("s2", "a", (1,), priority=50),
            run("big", "b", (0, 1, 2, 3), priority=90),
        ],
        [agent("a", (2, 3)), agent("b")],
        {"big"},
        "preempting 1 trial(s)",
    ),
    (
        "the gang spans agents when that preempts fewer trials",
        req("r", 4, priority=1),
        [
            run("a1", "a", (0, 1), priority=90, order=3.0),
            run("a2", "a", (2, 3), priority=50, order=1.0),
            run("b1", "b", (0, 1), priority=90, order=2.0),
            run("b2", "b", (2, 3), priority=50, order=0.0),
        ],
        [agent("a"), agent("b")],
        {"a1", "b1"},
        "preempting 2 trial(s)",
    ),
    (
        "one agent preferred when it costs no more trials",
        req("r", 4, priority=1),
        [
            run("a1", "a", (0, 1), priority=90, order=4.0),
            run("b1", "b", (0, 1), priority=90, order=3.0),
            run("a2", "a", (2, 3), priority=90, order=1.0),
            run("b2", "b", (2, 3), priority=50, order=2.0),
        ],
        [agent("a"), agent("b")],
        {"a1", "a2"},
        "preempting 2 trial(s)",
    ),
    (
        "a trial spanning agents frees all of its slots",
        req("r", 4, priority=1),
        [Running("wide", "w", (("a", (0, 1)), ("b", (0, 1))), priority=90)],
        [agent("a", (2, 3)), agent("b", (2, 3))],
        set(),  # it fits right now across a and b: nothing to preempt
        "",
    ),
]


@pytest.mark.parametrize(
    "request_,running,agents,victims,reason",
    [c[1:] for c in PRIORITY_CASES],
    ids=[c[0] for c in PRIORITY_CASES],
)
def test_priority_preemption(request_, running, agents, victims, reason) -> None:  # type: ignore[no-untyped-def]
    d = schedule(PRIO, [request_], running, agents)
    assert set(d.preemptions) == victims
    assert len(d.preemptions) == len(victims)
    if reason:
        assert d.waiting[request_.id].startswith(reason)
        assert not d.assignments
    else:
        assert request_.id in placed(d)


def test_no_preemption_when_the_pool_does_not_preempt() -> None:
    running = [run("low", "a", (0, 1, 2, 3), priority=90)]
    d = schedule(PoolPolicy(), [req("r", 1, priority=1)], running, [agent("a")])
    assert d.preemptions == [] and d.waiting == {"r": "waiting for 1 free slot(s)"}


def test_preempted_slots_are_not_reassigned_in_the_same_pass() -> None:
    # r (urgent) preempts `low`; `small` (lower priority than r, behind it) must take neither
    # low's slots nor the free slot r counts on.
    running = [run("low", "a", (0, 1, 2), priority=90)]
    reqs = [req("r", 4, priority=1), req("small", 1, priority=50)]
    d = schedule(PRIO, reqs, running, [agent("a", (3,))])
    assert d.preemptions == ["low"]
    assert d.assignments == []
    assert d.waiting["r"] == "preempting 1 trial(s) to make room"
    assert d.waiting["small"].startswith("waiting for 1 free slot(s)")


def test_stopping_trials_are_waited_for_not_preempted_again() -> None:
    # The next pass: `low` is still stopping; r waits for it, nothing more is preempted.
    running = [
        run("low", "a", (0, 1, 2), priority=90, preempting=True),
        run("other", "b", (0, 1, 2, 3), priority=90),
    ]
    d = schedule(PRIO, [req("r", 4, priority=1)], running, [agent("a", (3,)), agent("b")])
    assert d.preemptions == []
    assert d.waiting == {"r": "waiting for 1 preempted trial(s) to stop"}


def test_once_the_victim_is_gone_the_request_runs() -> None:
    d = schedule(PRIO, [req("r", 4, priority=1)], [], [agent("a", (0, 1, 2, 3))])
    assert placed(d) == {"r": (("a", (0, 1, 2, 3)),)}


def test_each_victim_serves_one_request() -> None:
    running = [run("v1", "a", (0, 1), priority=90), run("v2", "b", (0, 1), priority=90)]
    reqs = [req("r1", 2, priority=1), req("r2", 2, priority=1, order=1), req("r3", 2, priority=1)]
    d = schedule(PRIO, reqs, running, [agent("a", (), 2), agent("b", (), 2)])
    assert sorted(d.preemptions) == ["v1", "v2"]
    assert d.waiting["r1"].startswith("preempting") and d.waiting["r3"].startswith("preempting")
    assert d.waiting["r2"].startswith("waiting for 2 free slot(s)")


# -- fair share ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "capacity,demand,weight,expected",
    [
        (8, {"a": 8, "b": 8}, {"a": 1, "b": 1}, {"a": 4, "b": 4}),
        (9, {"a": 9, "b": 9}, {"a": 2, "b": 1}, {"a": 6, "b": 3}),
        (8, {"a": 2, "b": 8}, {"a": 1, "b": 1}, {"a": 2, "b": 6}),  # leftovers go to b
        (
            12,
            {"a": 1, "b": 20, "c": 20},
            {"a": 1, "b": 1, "c": 2},
            {"a": 1, "b": 11 / 3, "c": 22 / 3},
        ),
        (4, {"a": 0, "b": 4}, {"a": 1, "b": 1}, {"a": 0, "b": 4}),
    ],
)
def test_fair_shares_water_fill(capacity, demand, weight, expected) -> None:  # type: ignore[no-untyped-def]
    got = fair_shares(capacity, demand, weight)
    assert got == pytest.approx(expected)


def _count_by_job(d: Decision, jobs: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in d.assignments:
        out[jobs[a.request_id]] = out.get(jobs[a.request_id], 0) + 1
    return out


@pytest.mark.parametrize(
    "weights,max_slots,expected",
    [
        ({"A": 1.0, "B": 1.0}, {}, {"A": 4, "B": 4}),
        ({"A": 3.0, "B": 1.0}, {}, {"A": 6, "B": 2}),
        ({"A": 1.0, "B": 1.0}, {"A": 2}, {"A": 2, "B": 6}),  # A capped, the rest to B
        ({"A": 1.0, "B": 1.0, "C": 2.0}, {}, {"A": 2, "B": 2, "C": 4}),
    ],
)
def test_fair_share_splits_free_slots_by_weight(weights, max_slots, expected) -> None:  # type: ignore[no-untyped-def]
    reqs = [
        Request(f"{j}{i}", j, 1, order=i, weight=w, max_slots=max_slots.get(j))
        for j, w in weights.items()
        for i in range(10)
    ]
    d = schedule(FAIR, reqs, [], [agent("a", tuple(range(4))), agent("b", tuple(range(4)))])
    assert _count_by_job(d, {r.id: r.job_id for r in reqs}) == expected


def test_fair_share_is_work_conserving() -> None:
    reqs = [Request(f"A{i}", "A", 1, order=i) for i in range(3)]
    running = [run("b0", "a", (0,), job="B")]
    d = schedule(FAIR, reqs, running, [agent("a", (1, 2, 3))])
    assert len(d.assignments) == 3  # A goes over its share: nobody else wants the slots


def test_fair_share_counts_running_slots() -> None:
    running = [run(f"a{i}", "a", (i,), job="A") for i in range(3)]
    reqs = [Request("A9", "A", 1, order=0), Request("B0", "B", 1, order=1)]
    d = schedule(FAIR, reqs, running, [agent("a", (3,))])
    assert set(placed(d)) == {"B0"}
    assert d.waiting["A9"].startswith("waiting for 1 free slot(s); job A has its fair share")


def test_over_share_job_is_preempted_when_others_wait() -> None:
    running = [run(f"a{i}", "a", (i,), job="A", order=float(i)) for i in range(4)]
    reqs = [Request(f"B{i}", "B", 1, order=i) for i in range(4)]
    d = schedule(FAIR_P, reqs, running, [agent("a")])
    # shares 2 / 2: A's two newest go, B gets two trials' worth, no more
    assert d.preemptions == ["a3", "a2"]
    assert [d.waiting[f"B{i}"].startswith("preempting") for i in range(4)] == [1, 1, 0, 0]
    assert d.waiting["B2"].startswith("waiting for 1 free slot(s); job B has its fair share")


def test_no_fair_share_preemption_that_leaves_the_victim_worse_off() -> None:
    # A's only trial is a 4-gang; B wants 1 of 4 slots, sharing 2 / 2: preempting A would leave
    # A with nothing, worse off than B is now -- no ping-pong.
    running = [run("gang", "a", (0, 1, 2, 3), job="A")]
    reqs = [Request(f"B{i}", "B", 1, order=i) for i in range(2)]
    d = schedule(FAIR_P, reqs, running, [agent("a")])
    assert d.preemptions == []
    assert d.waiting["B0"] == "waiting for 1 free slot(s); no over-share work to preempt"


def test_under_share_jobs_are_not_preempted() -> None:
    running = [run("a0", "a", (0, 1), job="A"), run("b0", "a", (2, 3), job="B")]
    d = schedule(FAIR_P, [Request("C0", "C", 1)], running, [agent("a")])
    # shares: C 1, A 1.5, B 1.5: A and B are over, but each would drop to 0 < C's 0 -- no.
    assert d.preemptions == []
    running = [run(f"a{i}", "a", (i,), job="A", order=i) for i in range(3)]
    running.append(run("b0", "a", (3,), job="B"))
    d = schedule(FAIR_P, [Request("C0", "C", 1)], running, [agent("a")])
    assert d.preemptions == ["a2"]  # A is the over-share job, B (1 slot) is under its share


def test_fair_share_preemption_respects_preemptible() -> None:
    running = [
        run(f"a{i}", "a", (i,), job="A", order=float(i), preemptible=False) for i in range(4)
    ]
    d = schedule(FAIR_P, [Request("B0", "B", 1)], running, [agent("a")])
    assert d.preemptions == []


def test_fair_share_preempts_the_newest_trial_when_a_jobs_trials_share_its_order() -> None:
    # The master gives every trial of a job its job's order: the newest is then the later id,
    # compared as a number ("10" is newer than "9").
    for ids, newest in ((("1", "2", "3"), "3"), (("9", "10", "8"), "10")):
        running = [run(i, "a", (k,), job="A", order=5.0) for k, i in enumerate(ids)]
        d = schedule(FAIR_P, [req("b", 1, job="B", order=6.0)], running, [agent("a", (), 3)])
        assert d.preemptions == [newest]


def test_fair_share_victim_is_the_newest_trial_whatever_its_task_id() -> None:
    # Trials' task ids end in random UUIDs, and epoch-second orders cannot carry a trial id in
    # their fraction: the newest trial is the one with the later `seq` (the master's trial id).
    ids = ("7.f3c1", "7.0a9e", "7.b4d2")
    for newest in range(3):
        running = [
            Running(i, "A", (("a", (k,)),), order=1.8e9, seq=100 + ((k - newest - 1) % 3))
            for k, i in enumerate(ids)
        ]
        d = schedule(FAIR_P, [req("b", 1, job="B", order=1.8e9 + 1)], running, [agent("a", (), 3)])
        assert d.preemptions == [ids[newest]]
