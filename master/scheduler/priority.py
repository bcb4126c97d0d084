"""The priority scheduler: lower priority number first, FIFO (`order`) within a priority.

A request that does not fit now blocks nothing smaller behind it (backfilling). With preemption,
a request that does not fit may preempt strictly lower-priority running trials: the least
valuable first (lowest priority, then newest), only as many as it needs, and only when that
makes it placeable.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from operator import attrgetter

from master.scheduler.engine import NO_ROOM, Pass
from master.scheduler.types import AgentView, Decision, PoolPolicy, Request, Running

request_key = attrgetter("priority", "order", "seq", "id")


def run_priority(p: Pass, requests: Sequence[Request]) -> None:
    preempt = p.policy.preemption
    cands = p.candidates() if preempt else []  # least valuable first
    start = 0  # cands[:start] are all victims already
    end = len(cands)  # cands[:end] have a lower priority than the current request
    above = sum(p.size[c.id] for c in cands)  # slots of cands[:end] that are not victims yet
    level = -1
    place, wait, waiting_for, victims = p.place, p.wait, p.waiting_for, p.victims
    preemptions, size = p.decision.preemptions, p.size
    for req in sorted(requests, key=request_key):
        if place(req) != NO_ROOM:
            continue
        n = req.slots
        if not preempt:
            wait(req, waiting_for(n))
            continue
        if req.priority != level:
            level = req.priority
            while end > 0 and cands[end - 1].priority <= level:
                end -= 1
                if cands[end].id not in victims:
                    above -= size[cands[end].id]
        before = len(preemptions)
        if p.virt.total + above < n or not _preempt(p, req, cands, start, end):
            wait(req, waiting_for(n, "; running work has equal or higher priority"))
            continue
        for v in preemptions[before:]:
            above -= size[v]
        while start < len(cands) and cands[start].id in victims:
            start += 1


def _preempt(p: Pass, req: Request, cands: list[Running], start: int, end: int) -> bool:
    need = req.slots - p.virt.total
    greedy: list[Running] = []
    i = start
    while need > 0 and i < end:
        c = cands[i]
        i += 1
        if c.id not in p.victims:
            greedy.append(c)
            need -= p.size[c.id]
    if need > 0 and p.span:
        return False
    if not greedy:
        return False
    # On one agent, anything of no higher priority than the most valuable greedy victim.
    return p.preempt_for(req, greedy, level=greedy[-1].priority)


def priority_queue_order(requests: Iterable[Request], running: Iterable[Running]) -> list[str]:
    """Job ids by (best priority, earliest order) over their queued and running trials."""
    key: dict[str, tuple[int, float]] = {}
    everyone: tuple[Request | Running, ...] = (*requests, *running)
    for r in everyone:
        k = (r.priority, r.order)
        old = key.get(r.job)
        if old is None or k < old:
            key[r.job] = k
    return sorted(key, key=lambda j: (key[j], j))


def schedule_priority(requests: Iterable[Request], agents: Iterable[AgentView]) -> Decision:
    """The master's original entry point (all pools at once, no running trials, no gang spanning
    agents). Kept until the master calls `schedule` per pool."""
    by_pool: dict[str, list[AgentView]] = defaultdict(list)
    for a in agents:
        by_pool[a.pool].append(a)
    reqs: dict[str, list[Request]] = defaultdict(list)
    for r in requests:
        reqs[r.pool].append(r)
    out = Decision()
    for pool, pool_reqs in reqs.items():
        p = Pass(PoolPolicy(), (), by_pool.get(pool, []), span=False)
        run_priority(p, pool_reqs)
        out.assignments += p.decision.assignments
        out.waiting.update(p.decision.waiting)
    return out
