"""The pure filter that keeps other users' tasks off agents that cannot isolate them: an agent
with `only_uid` runs only requests whose owner is linked to that uid (master/scheduler/
acceptance.py, docs/security.md)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.identity import IdentityRefused, Isolation, Mode
from detlab.protocol import PROTOCOL_VERSION, PollRequest, ProtocolError, StartSpec, TaskUser
from master.scheduler import AgentView, PoolPolicy, Request, Running, schedule
from master.scheduler.acceptance import eligible_for, runs_task_of

ALICE, BOB = 1001, 1002  # the Unix uids the two users are linked to
POLICIES = [
    PoolPolicy(),
    PoolPolicy(type="fair_share"),
    PoolPolicy(preemption=True),
    PoolPolicy(type="fair_share", preemption=True),
    PoolPolicy(fitting_policy="worst"),
]


def agent(aid: str, free: int, only_uid: int | None = None) -> AgentView:
    return AgentView(aid, "default", tuple(range(free)), free, only_uid=only_uid)


def req(rid: str, uid: int | None, slots: int = 1, owner: str | None = None, **kw) -> Request:  # type: ignore[no-untyped-def]
    return Request(rid, rid, slots, unix_uid=uid, owner=f"u{uid}" if owner is None else owner, **kw)


def where(decision) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    return {a.request_id: {aid for aid, _ in a.placements} for a in decision.assignments}


def test_runs_task_of() -> None:
    shared = agent("s", 1)
    own = agent("o", 1, only_uid=ALICE)
    assert runs_task_of(shared, None) and runs_task_of(shared, BOB)
    assert runs_task_of(own, ALICE)
    assert not runs_task_of(own, BOB) and not runs_task_of(own, None)


def test_eligible_for_counts_only_the_agents_that_run_the_owner() -> None:
    agents = [agent("a", 4, only_uid=ALICE), agent("b", 2), agent("c", 8, only_uid=BOB)]
    el = eligible_for(agents, ALICE)
    assert el.refusing == ("c",) and el.capacity == 6 and el.largest == 4 and el.first == "a"
    nobody = eligible_for([agent("a", 4, only_uid=ALICE)], BOB)
    assert nobody.refusing == ("a",) and nobody.first is None and nobody.capacity == 0


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.type}-{p.preemption}")
def test_other_users_requests_skip_an_own_user_agent(policy: PoolPolicy) -> None:
    # Bob's request is first in the queue and best fits on alice's (tighter) agent: it must go
    # to the shared one; alice's own request may use her agent.
    agents = [agent("alice-box", 1, only_uid=ALICE), agent("shared", 2)]
    d = schedule(policy, [req("bob", BOB, order=0.0), req("alice", ALICE)], [], agents)
    assert where(d)["bob"] == {"shared"}
    assert "alice" in where(d)


def test_a_request_no_agent_will_ever_run_says_so() -> None:
    agents = [agent("alice-box", 4, only_uid=ALICE)]
    d = schedule(PoolPolicy(), [req("b", BOB, owner="bob"), req("n", None, owner="")], [], agents)
    assert not d.assignments
    reason = d.waiting["b"]
    assert "no agent in resource pool 'default' runs tasks of 'bob'" in reason
    assert "alice-box (uid 1001)" in reason and "--shared-unisolated" in reason
    assert "runs tasks of an unknown user" in d.waiting["n"]


def test_a_request_waits_for_the_agents_that_run_it_not_the_pool() -> None:
    # Bob may use only "shared" (1 slot, busy): he waits although alice's agent is free, and
    # his reason names the agents that run his tasks; a gang bigger than they hold says so.
    agents = [agent("alice-box", 4, only_uid=ALICE), AgentView("shared", "default", (), 1)]
    d = schedule(PoolPolicy(), [req("b1", BOB, owner="bob"), req("b2", BOB, 3, "bob")], [], agents)
    assert not d.assignments
    assert d.waiting["b1"] == "waiting for 1 free slot(s) on agents that run tasks of 'bob'"
    assert (
        d.waiting["b2"] == "needs 3 slots; the agents that run tasks of 'bob' have 1 slots in all"
    )
    # Alice's tasks still fill her agent, and the hidden agent is whole again for her.
    d = schedule(PoolPolicy(), [req("b", BOB), req("a", ALICE, 4)], [], agents)
    assert where(d) == {"a": {"alice-box"}}


def test_unrestricted_pools_are_untouched_by_the_filter() -> None:
    agents = [agent("a", 2), agent("b", 1)]
    reqs = [req("x", None), req("y", BOB), req("z", ALICE)]
    plain = schedule(PoolPolicy(), [Request(r.id, r.job_id) for r in reqs], [], agents)
    assert schedule(PoolPolicy(), reqs, [], agents).assignments == plain.assignments


def test_a_failed_filtered_request_does_not_stop_a_bigger_unfiltered_one() -> None:
    # Bob's 2-slot gang fails among his agents; alice's 2-slot gang behind it still fits on hers
    # (the pass's "smallest gang that failed" must not carry over from a filtered view).
    agents = [agent("alice-box", 2, only_uid=ALICE), agent("shared", 1)]
    d = schedule(
        PoolPolicy(), [req("b", BOB, 2, order=0.0), req("a", ALICE, 2, order=1.0)], [], agents
    )
    assert where(d) == {"a": {"alice-box"}}


@st.composite
def mixed_pools(draw):  # type: ignore[no-untyped-def]
    uids = [None, ALICE, BOB]
    agents = [
        AgentView(
            f"a{i}",
            "default",
            tuple(s for s in range(total) if draw(st.booleans())),
            total,
            only_uid=draw(st.sampled_from([None, None, ALICE, BOB])),
        )
        for i, total in enumerate(draw(st.lists(st.integers(1, 4), max_size=5)))
    ]
    requests = [
        Request(
            f"r{i}",
            str(draw(st.integers(0, 3))),
            draw(st.integers(0, 5)),
            draw(st.integers(1, 99)),
            float(i),
            unix_uid=draw(st.sampled_from(uids)),
        )
        for i in range(draw(st.integers(0, 10)))
    ]
    running = [
        Running(f"run{a.id}", "9", ((a.id, tuple(s for s in range(a.total) if s not in a.free)),))
        for a in agents
        if len(a.free) < a.total
    ]
    policy = draw(st.sampled_from(POLICIES))
    span = draw(st.booleans())
    return policy, requests, running, agents, span


@settings(max_examples=300, deadline=None)
@given(mixed_pools())
def test_property_never_on_a_refusing_agent(case) -> None:  # type: ignore[no-untyped-def]
    policy, requests, running, agents, span = case
    d = schedule(policy, requests, running, agents, span=span)
    by_id = {a.id: a for a in agents}
    by_req = {r.id: r for r in requests}
    used: Counter[tuple[str, int]] = Counter()
    for a in d.assignments:
        r = by_req[a.request_id]
        assert sum(len(s) for _, s in a.placements) == max(r.slots, 0)
        for aid, slots in a.placements:
            assert runs_task_of(by_id[aid], r.unix_uid), (r, aid)
            for s in slots:
                assert s in by_id[aid].free
                used[(aid, s)] += 1
    assert all(c == 1 for c in used.values())
    assigned = {a.request_id for a in d.assignments}
    for r in requests:
        assert r.id in assigned or r.id in d.waiting


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("linked", [None, ALICE, BOB])
def test_the_scheduler_places_exactly_what_the_agent_would_run(
    mode: Mode, linked: int | None
) -> None:
    # The agent's own rule (Isolation.plan) and the master's filter agree for every mode, the
    # acceptance travelling through the poll's JSON as it does between them.
    iso = Isolation(mode, agent_uid=ALICE, agent_gid=ALICE)
    sent = PollRequest(acceptance=iso.acceptance()).to_json()
    acc = PollRequest.parse(sent).acceptance
    assert acc is not None and acc == iso.acceptance()
    view = AgentView("a", "default", (0,), 1, only_uid=acc.only_uid)
    user = TaskUser(user_id=7, username="u", uid=linked, gid=linked)
    spec = StartSpec("alloc", 1, 1, "true", (0,), {}, user=user)
    if mode == Mode.ISOLATED and linked == ALICE:
        # A user linked to the isolating agent's own uid is a misconfiguration, not a matter of
        # whose tasks it takes: the scheduler places the trial and it fails at once naming it.
        with pytest.raises(IdentityRefused, match="the agent's own or root's"):
            iso.plan(spec)
        assert runs_task_of(view, linked)
        return
    try:
        iso.plan(spec)
        runs = True
    except IdentityRefused:
        runs = False
    assert runs_task_of(view, linked) == runs


@pytest.mark.parametrize(
    "bad",
    [{"mode": "root", "uid": 0}, {"mode": "own_user"}, {"mode": "own_user", "uid": -1}, []],
)
def test_a_malformed_acceptance_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ProtocolError) as e:
        PollRequest.parse({"protocol": PROTOCOL_VERSION, "acceptance": bad})
    assert e.value.path.startswith("acceptance")
