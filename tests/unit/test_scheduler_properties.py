"""Property tests: whatever the pool, running set, queue and policy, a pass never hands out a
slot twice or one that is not free, gangs are all-or-nothing, every request is accounted for,
and preemption only takes what the rules allow."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from master.scheduler import AgentView, PoolPolicy, Request, Running, schedule


@st.composite
def pools(draw):  # type: ignore[no-untyped-def]
    n_agents = draw(st.integers(0, 6))
    agents: list[AgentView] = []
    running: list[Running] = []
    jobs = [str(j) for j in range(draw(st.integers(1, 4)))]
    caps = {j: draw(st.none() | st.integers(1, 10)) for j in jobs}
    weights = {j: draw(st.sampled_from([0.5, 1.0, 3.0])) for j in jobs}
    held: list[tuple[str, int]] = []  # (agent, slot) used by running trials
    for a in range(n_agents):
        total = draw(st.integers(1, 8))
        slots = list(range(total))
        free = []
        for s in slots:
            if draw(st.booleans()):
                free.append(s)
            else:
                held.append((f"a{a}", s))
        agents.append(AgentView(f"a{a}", "default", tuple(free), total))
    i = 0
    while held:  # group held slots into running trials, some spanning agents
        k = draw(st.integers(1, min(3, len(held))))
        chunk, held = held[:k], held[k:]
        by_agent: dict[str, list[int]] = {}
        for agent_id, s in chunk:
            by_agent.setdefault(agent_id, []).append(s)
        job = draw(st.sampled_from(jobs))
        running.append(
            Running(
                f"run{i}",
                job,
                tuple((agent_id, tuple(ss)) for agent_id, ss in by_agent.items()),
                priority=draw(st.integers(1, 99)),
                order=float(draw(st.integers(0, 20))),
                weight=weights[job],
                max_slots=caps[job],
                preemptible=draw(st.booleans()) or draw(st.booleans()),
                preempting=draw(st.integers(0, 5)) == 0,
            )
        )
        i += 1
    requests = []
    for r in range(draw(st.integers(0, 12))):
        job = draw(st.sampled_from(jobs))
        requests.append(
            Request(
                f"req{r}",
                job,
                draw(st.sampled_from([0, 1, 1, 2, 3, 4, 8, 20])),
                priority=draw(st.integers(1, 99)),
                order=float(draw(st.integers(0, 20))),
                weight=weights[job],
                max_slots=caps[job],
            )
        )
    policy = PoolPolicy(
        draw(st.sampled_from(["priority", "fair_share"])),
        draw(st.booleans()),
        draw(st.sampled_from(["best", "worst"])),
    )
    return policy, requests, running, agents


@settings(max_examples=400, deadline=None)
@given(pools())
def test_a_pass_never_over_allocates(case) -> None:  # type: ignore[no-untyped-def]
    policy, requests, running, agents = case
    d = schedule(policy, requests, running, agents)
    free = {(a.id, s) for a in agents for s in a.free}
    by_id = {r.id: r for r in requests}
    used: list[tuple[str, int]] = []
    for a in d.assignments:
        r = by_id[a.request_id]
        got = [(agent_id, s) for agent_id, slots in a.placements for s in slots]
        assert len(got) == r.slots  # the whole gang or nothing
        assert len({agent_id for agent_id, _ in a.placements}) == len(a.placements)
        if r.slots == 0:
            assert len(a.placements) == 1 and a.placements[0][0] in {x.id for x in agents}
        used += got
    assert len(used) == len(set(used)), "a slot handed out twice"
    assert set(used) <= free, "a slot handed out that was not free"

    # Every request is either assigned or waiting with a reason, never both.
    assigned = [a.request_id for a in d.assignments]
    assert len(assigned) == len(set(assigned))
    assert set(assigned).isdisjoint(d.waiting)
    assert set(assigned) | set(d.waiting) == set(by_id)
    assert all(d.waiting.values())

    # max_slots: a job within its cap stays within it.
    holding = Counter()
    for r in running:
        holding[r.job_id] += r.slots
    for a in d.assignments:
        holding[by_id[a.request_id].job_id] += by_id[a.request_id].slots
    for r in requests:
        if r.max_slots is not None:
            before = sum(x.slots for x in running if x.job_id == r.job_id)
            assert holding[r.job_id] <= max(r.max_slots, before)

    # Preemption: only when enabled, only preemptible trials not already stopping, each once,
    # and only for a request that then waits for it.
    run_by_id = {r.id: r for r in running}
    assert len(d.preemptions) == len(set(d.preemptions))
    if not policy.preemption:
        assert d.preemptions == []
    for v in d.preemptions:
        victim = run_by_id[v]
        assert victim.preemptible and not victim.preempting
    preempting_for = [by_id[rid] for rid, why in d.waiting.items() if why.startswith("preempting")]
    assert bool(d.preemptions) == bool(preempting_for)
    if policy.type == "priority" and d.preemptions:
        # a victim is of strictly lower priority than (at least) the most urgent request it serves
        most_urgent = min(r.priority for r in preempting_for)
        assert all(run_by_id[v].priority > most_urgent for v in d.preemptions)
    # The slots the victims and free slots offer cover what the preempting requests claimed.
    if preempting_for:
        freed = sum(run_by_id[v].slots for v in d.preemptions)
        stopping = sum(r.slots for r in running if r.preempting)
        assert sum(r.slots for r in preempting_for) <= freed + stopping + len(free)


@settings(max_examples=150, deadline=None)
@given(pools())
def test_a_pass_is_deterministic_and_pure(case) -> None:  # type: ignore[no-untyped-def]
    policy, requests, running, agents = case
    first = schedule(policy, requests, running, agents)
    again = schedule(policy, list(requests), list(running), list(agents))
    assert first == again
