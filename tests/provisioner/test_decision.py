"""The pure scale decision: tables, hypothesis properties, and a virtual-time simulation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from master.provisioner.decision import InstanceView, PoolLimits, decide, determined_rule
from master.scheduler import AgentView, Request

NOW = 10_000.0


def req(i: int, slots: int = 1, priority: int = 42) -> Request:
    return Request(id=str(i), slots=slots, priority=priority, order=float(i))


def idle(i: str, since: float, free: int = 1) -> InstanceView:
    return InstanceView(
        i, launched_at=0.0, connected=True, free=tuple(range(free)), idle_since=since
    )


def busy(i: str, free: int = 0) -> InstanceView:
    return InstanceView(i, launched_at=0.0, connected=True, free=tuple(range(free)), busy=True)


def starting(i: str, launched: float = NOW - 1) -> InstanceView:
    return InstanceView(i, launched_at=launched)


# -- tables -------------------------------------------------------------------------------------


def test_nothing_pending_nothing_launched() -> None:
    d = decide(PoolLimits(), [], [], NOW)
    assert (d.launch, d.terminate, d.wanted) == (0, [], 0)


def test_ten_one_slot_trials_max_three_launch_exactly_three() -> None:
    d = decide(PoolLimits(max_instances=3), [], [req(i) for i in range(10)], NOW)
    assert d.launch == 3
    assert d.wanted == 10
    assert len(d.unfit) == 7 and all("max_instances" in v for v in d.unfit.values())


def test_gang_gets_one_instance_that_fits_never_several_small_ones() -> None:
    # A 4-slot trial on 4-slot instances: one instance.
    d = decide(PoolLimits(instance_slots=4, max_instances=10), [], [req(1, 4)], NOW)
    assert d.launch == 1
    # A 4-slot trial on 1-slot instances: nothing (never four 1-slot instances), and why.
    d = decide(PoolLimits(instance_slots=1, max_instances=10), [], [req(1, 4)], NOW)
    assert d.launch == 0
    assert "needs 4 slots on one agent" in d.unfit["1"]


def test_gangs_are_packed_into_instances_like_the_scheduler_would() -> None:
    # 3+1 and 2+2 fill two 4-slot instances; a 3 and a 3 need two.
    lim = PoolLimits(instance_slots=4, max_instances=10)
    assert decide(lim, [], [req(1, 3), req(2, 1), req(3, 2), req(4, 2)], NOW).launch == 2
    assert decide(lim, [], [req(1, 3), req(2, 3)], NOW).launch == 2


def test_free_and_starting_capacity_is_subtracted() -> None:
    lim = PoolLimits(instance_slots=2, max_instances=10)
    # One idle connected instance with 2 free slots and one starting: 4 slots coming.
    insts = [idle("i1", NOW - 1, free=2), starting("i2")]
    d = decide(lim, insts, [req(i) for i in range(5)], NOW)
    assert d.launch == 1  # 5 pending - 4 = 1 slot -> one more instance
    assert d.terminate == []
    # A static agent's free slots count as well.
    d = decide(lim, [], [req(1), req(2)], NOW, static_agents=[AgentView("s", "p", (0, 1), 2)])
    assert d.launch == 0


def test_idle_instance_reaped_after_max_idle_but_not_below_min() -> None:
    lim = PoolLimits(max_idle=60, min_instances=1)
    d = decide(lim, [idle("a", NOW - 61), idle("b", NOW - 120)], [], NOW)
    assert d.terminate == [("b", "idle for 60s")]  # the longest idle; "a" keeps the minimum
    d = decide(lim, [idle("a", NOW - 30)], [], NOW)
    assert d.terminate == []


def test_idle_instance_needed_by_pending_work_is_kept() -> None:
    lim = PoolLimits(max_idle=60)
    d = decide(lim, [idle("a", NOW - 600)], [req(1)], NOW)
    assert d.terminate == [] and d.launch == 0


def test_busy_instance_never_terminated_even_over_max() -> None:
    lim = PoolLimits(max_instances=1, max_idle=1)
    d = decide(lim, [busy("a"), busy("b"), idle("c", NOW - 5)], [], NOW)
    assert [i for i, _ in d.terminate] == ["c"]
    assert d.launch == 0


def test_over_max_idle_first_then_starting() -> None:
    lim = PoolLimits(max_instances=1, max_idle=1000)
    d = decide(lim, [idle("a", NOW - 5), starting("b"), busy("c")], [], NOW)
    assert [i for i, _ in d.terminate] == ["a", "b"]
    assert all("over max_instances" in why for _, why in d.terminate)


def test_instance_that_never_connects_is_replaced() -> None:
    lim = PoolLimits(max_starting=100, max_instances=3)
    d = decide(lim, [starting("late", NOW - 101)], [req(1)], NOW)
    assert d.terminate == [("late", "its agent did not connect within 100s")]
    assert d.launch == 1


def test_min_instances_kept_up_and_backoff_blocks_launches() -> None:
    lim = PoolLimits(min_instances=2, max_instances=4)
    assert decide(lim, [], [], NOW).launch == 2
    d = decide(lim, [], [req(1)], NOW, launch_allowed=False)
    assert d.launch == 0 and d.wanted == 1


def test_priority_order_decides_who_gets_the_last_instance() -> None:
    lim = PoolLimits(instance_slots=2, max_instances=1)
    d = decide(lim, [], [req(1, 2, priority=50), req(2, 2, priority=10)], NOW)
    assert d.launch == 1 and set(d.unfit) == {"1"}


def test_determined_rule_ignores_idle_capacity() -> None:
    lim = PoolLimits(instance_slots=4, max_instances=10)
    assert determined_rule(lim, n_instances=2, pending_slots=5) == 2
    assert determined_rule(lim, n_instances=9, pending_slots=50) == 1


# -- properties ---------------------------------------------------------------------------------


@st.composite
def scenarios(draw):  # type: ignore[no-untyped-def]
    slots = draw(st.integers(1, 8))
    mn = draw(st.integers(0, 4))
    mx = draw(st.integers(mn, 8))
    lim = PoolLimits(
        min_instances=mn,
        max_instances=mx,
        instance_slots=slots,
        max_idle=draw(st.sampled_from([1.0, 60.0, 600.0])),
        max_starting=draw(st.sampled_from([10.0, 600.0])),
    )
    insts = []
    for i in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["idle", "busy", "starting"]))
        launched = NOW - draw(st.floats(0, 1000))
        if kind == "starting":
            insts.append(InstanceView(f"i{i}", launched_at=launched))
        else:
            free = draw(st.integers(0, slots if kind == "idle" else slots - 1))
            insts.append(
                InstanceView(
                    f"i{i}",
                    launched_at=launched,
                    connected=True,
                    free=tuple(range(slots - free, slots))
                    if kind == "busy"
                    else tuple(range(slots)),
                    busy=kind == "busy",
                    idle_since=None if kind == "busy" else NOW - draw(st.floats(0, 1000)),
                )
            )
    pending = [
        req(i, draw(st.integers(1, 10)), draw(st.sampled_from([1, 42, 99])))
        for i in range(draw(st.integers(0, 30)))
    ]
    return lim, insts, pending


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_properties(s) -> None:  # type: ignore[no-untyped-def]
    lim, insts, pending = s
    d = decide(lim, insts, pending, NOW)
    term = {i for i, _ in d.terminate}
    by_id = {i.id: i for i in insts}
    # Never terminates a busy instance; terminates each at most once, and only known ones.
    assert len(term) == len(d.terminate) and term <= set(by_id)
    assert not any(by_id[i].busy for i in term)
    remaining = len(insts) - len(term)
    after = remaining + d.launch
    # Never above max (a launch never pushes past it), never below min when it may launch.
    assert d.launch == 0 or after <= lim.max_instances
    assert after >= min(lim.min_instances, lim.max_instances) or remaining > lim.max_instances
    # Idle terminations (not stuck, not over max) never take the pool below min.
    idle_terms = [i for i, why in d.terminate if why.startswith("idle")]
    assert not idle_terms or remaining >= lim.min_instances
    # Gangs: nothing is launched for work that no single instance can hold.
    if all(r.slots > lim.instance_slots for r in pending) and lim.min_instances == 0:
        assert d.launch == 0
    # Each launch is opened by a pending gang that fits an instance (or keeps the minimum).
    fitting = [r for r in pending if r.slots <= lim.instance_slots]
    assert d.launch <= max(len(fitting), lim.min_instances)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 4),
    st.lists(st.integers(1, 4), min_size=1, max_size=20),
)
def test_unbounded_pool_launches_enough_for_every_gang(slots: int, sizes: list[int]) -> None:
    """With room to grow, after the launches every pending gang that fits an instance has
    one: simulated by placing them on the new instances with the scheduler's own index."""
    from master.scheduler import SlotIndex

    lim = PoolLimits(instance_slots=slots, max_instances=1000)
    pending = [req(i, n) for i, n in enumerate(sizes)]
    d = decide(lim, [], pending, NOW)
    index = SlotIndex(slots)
    for k in range(d.launch):
        index.add_agent(f"n{k}", range(slots))
    for r in sorted(pending, key=lambda r: r.order):
        if r.slots > slots:
            continue
        fit = index.fit(r.slots, span=False)
        assert fit is not None, (sizes, d.launch)
        for a, c in fit:
            index.take(a, c)
    assert d.launch <= len([r for r in pending if r.slots <= slots])


# -- virtual time -------------------------------------------------------------------------------


def test_simulated_burst_scales_up_then_reaps_to_min() -> None:
    """A burst of 6 one-hour 1-slot trials on 2-slot instances (max 4, min 1), virtual clock:
    instances boot in 60 s, trials run 3600 s, idle ones go after 300 s."""
    lim = PoolLimits(min_instances=1, max_instances=4, instance_slots=2, max_idle=300)
    t = 0.0
    insts: dict[str, dict] = {}  # id -> {launched, free, running: [end times], idle_since}
    queue = [req(i) for i in range(6)]
    n = 0
    peak = 0
    while t < 3 * 3600:
        views = []
        for i, x in insts.items():
            connected = t - x["launched"] >= 60
            x["running"] = [e for e in x["running"] if e > t]
            if connected and x["connected_at"] is None:
                x["connected_at"] = t
            if x["running"]:
                x["idle_since"] = None
            elif connected and x["idle_since"] is None:
                x["idle_since"] = t
            views.append(
                InstanceView(
                    i,
                    launched_at=x["launched"],
                    connected=connected,
                    free=tuple(range(2 - len(x["running"]))) if connected else (),
                    busy=bool(x["running"]),
                    idle_since=x["idle_since"],
                )
            )
        d = decide(lim, views, queue, t)
        for i, _ in d.terminate:
            assert not insts[i]["running"]
            del insts[i]
        for _ in range(d.launch):
            n += 1
            insts[f"i{n}"] = {
                "launched": t,
                "running": [],
                "idle_since": None,
                "connected_at": None,
            }
        # The scheduler: place queued trials on connected instances' free slots.
        for x in insts.values():
            while queue and t - x["launched"] >= 60 and len(x["running"]) < 2:
                queue.pop(0)
                x["running"].append(t + 3600)
        peak = max(peak, len(insts))
        assert len(insts) <= lim.max_instances
        t += 10
    assert not queue
    assert peak == 3  # 6 one-slot trials on 2-slot instances: 3, not 4 (max) nor 6
    assert len(insts) == lim.min_instances  # reaped back to the minimum
