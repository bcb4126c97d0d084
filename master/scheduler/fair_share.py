"""The fair-share scheduler: the pool's slots shared among active jobs by weight.

Each job's share is its weighted part of the pool, water-filled (a job wanting less than its part
gets what it wants and the rest is split among the others) and capped by its max_slots. Slots go
to the job with the least allocation per weight first, one trial at a time, so free slots are
never left idle while someone can use them (a job may go over its share when nobody else waits).
With preemption, a job under its share may preempt trials of over-share jobs, the most over-share
job first and its newest trial first, as long as the victim's job stays better off (relative to
its share) than the waiting job is now: no ping-pong between jobs.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence

from master.scheduler.engine import BLOCKED, NO_ROOM, PLACED, Pass
from master.scheduler.types import Request, Running

Job = str


def fair_shares(
    capacity: float, demand: dict[Job, int], weight: dict[Job, float]
) -> dict[Job, float]:
    """Water-filling: a job gets min(demand, weighted part of what the others leave)."""
    out: dict[Job, float] = {}
    left = float(capacity)
    w_left = sum(weight[j] for j in demand)
    for j in sorted(demand, key=lambda j: (demand[j] / weight[j], j)):
        part = left * weight[j] / w_left if w_left > 0 else 0.0
        out[j] = min(float(demand[j]), part)
        left -= out[j]
        w_left -= weight[j]
    return out


def _job_params(
    requests: Iterable[Request], running: Iterable[Running]
) -> tuple[dict[Job, float], dict[Job, int | None], dict[Job, float]]:
    weight: dict[Job, float] = {}
    cap: dict[Job, int | None] = {}
    first: dict[Job, float] = {}
    everyone: tuple[Request | Running, ...] = (*running, *requests)
    for r in everyone:
        j = r.job
        if j not in weight:
            weight[j] = max(r.weight, 1e-9)
            cap[j] = r.max_slots
            first[j] = r.order
        elif r.order < first[j]:
            first[j] = r.order
    return weight, cap, first


def run_fair_share(p: Pass, requests: Sequence[Request]) -> None:
    weight, cap, first = _job_params(requests, p.running)
    queued, share = _queues_and_shares(p, requests, weight, cap)
    victims = _Victims(p, share) if p.policy.preemption else None
    at_share: dict[Job, str] = {}
    heap = [(p.alloc[j] / weight[j], first[j], j) for j in queued]
    heapq.heapify(heap)
    nxt: dict[Job, int] = defaultdict(int)
    waiting = p.decision.waiting
    while heap:
        _, fo, j = heapq.heappop(heap)
        rs = queued[j]
        req = rs[nxt[j]]
        nxt[j] += 1
        outcome = p.place(req)
        if outcome == NO_ROOM:
            outcome = _no_room(p, req, share, at_share, victims)
        if outcome == BLOCKED:
            _block_as_big(waiting, req, rs, nxt[j])
        if nxt[j] < len(rs):
            heapq.heappush(heap, (p.alloc[j] / weight[j], fo, j))


def _queues_and_shares(
    p: Pass,
    requests: Sequence[Request],
    weight: dict[Job, float],
    cap: dict[Job, int | None],
) -> tuple[dict[Job, list[Request]], dict[Job, float]]:
    """Each job's queued requests (in order) and its fair share of the pool."""
    queued: dict[Job, list[Request]] = defaultdict(list)
    for r in requests:
        queued[r.job].append(r)
    demand: dict[Job, int] = defaultdict(int)
    for j, n in p.alloc.items():
        demand[j] += n
    for j, rs in queued.items():
        rs.sort(key=lambda r: (r.order, r.seq, r.id))
        demand[j] += sum(r.slots for r in rs)
    for j in demand:
        c = cap[j]
        if c is not None:
            demand[j] = min(demand[j], c)
    return queued, fair_shares(p.capacity, demand, weight)


def _no_room(
    p: Pass,
    req: Request,
    share: dict[Job, float],
    at_share: dict[Job, str],
    victims: _Victims | None,
) -> int:
    """`req` does not fit the free slots: preempt for it (PLACED) or say why it waits
    (BLOCKED)."""
    j, n = req.job, req.slots
    a, s = p.alloc[j], share.get(j, 0.0)
    if a >= s:
        why = at_share.get(j)
        if why is None:
            why = at_share[j] = f"; job {j} has its fair share ({s:.3g} slots)"
        p.wait(req, p.waiting_for(n) + why)
    elif victims is None:
        p.wait(req, p.waiting_for(n))
    elif victims.preempt_for(req, _rel(a, s)):
        return PLACED
    else:
        p.wait(req, p.waiting_for(n, "; no over-share work to preempt"))
    return BLOCKED


def _block_as_big(waiting: dict[str, str], req: Request, rs: list[Request], start: int) -> None:
    """The job's other requests at least as big as `req` wait for the same reason (free slots
    only get fewer in a pass, and the job's allocation only grows): they leave `rs[start:]`."""
    reason = waiting[req.id]
    n = req.slots
    rest = [r for r in rs[start:] if r.slots < n]
    for r in rs[start:]:
        if r.slots >= n:
            waiting[r.id] = reason
    rs[start:] = rest


def _newness(r: Running) -> tuple[float, int, int, str]:
    """Later order is newer; on a tie (trials of one job share their job's order), the later
    `seq` (the trial id), then the later id (numeric ids compare as numbers: "10" after "9")."""
    return (r.order, r.seq, len(r.id), r.id)


class _Victims:
    """Over-share jobs in a lazy max-heap keyed by where each would stand (allocation relative
    to its share) after losing its newest preemptible trial, so the job that stays best off goes
    first and a search that cannot succeed stops at the top of the heap."""

    def __init__(self, p: Pass, share: dict[Job, float]) -> None:
        self.p = p
        self.share = share
        self.cands: dict[Job, list[Running]] = defaultdict(list)
        for r in p.running:
            if r.preemptible and not r.preempting and p.size[r.id] > 0:
                self.cands[r.job].append(r)
        for lst in self.cands.values():
            lst.sort(key=_newness, reverse=True)  # newest first
        self.ptr: dict[Job, int] = defaultdict(int)  # cands[k][:ptr[k]] are victims already
        # Entries: (-relative allocation after losing the newest, job, allocation, version); one
        # whose version is not the job's current one is dropped when it surfaces, one whose
        # allocation is not the job's current one is re-keyed.
        self.ver: dict[Job, int] = defaultdict(int)
        self.heap: list[tuple[float, Job, int, int]] = []
        for k in self.cands:
            e = self._entry(k, p.alloc[k], self._next(k, 0))
            if e is not None:
                self.heap.append(e)
        heapq.heapify(self.heap)
        # Failed searches: slots -> (requester's relative allocation, virt.total then). A later
        # request as big, no less served, with no more slots about to free, fails too.
        self.failed: dict[int, tuple[float, int]] = {}

    def _next(self, k: Job, i: int) -> int:
        lst, victims = self.cands[k], self.p.victims
        while i < len(lst) and lst[i].id in victims:
            i += 1
        return i

    def _entry(self, k: Job, alloc: int, i: int) -> tuple[float, Job, int, int] | None:
        lst, s = self.cands[k], self.share[k]
        if i >= len(lst) or alloc <= s:
            return None
        return (-_rel(alloc - self.p.held[lst[i].id], s), k, alloc, self.ver[k])

    def preempt_for(self, req: Request, ratio: float) -> bool:
        p, heap, ver = self.p, self.heap, self.ver
        n = req.slots
        vt = p.virt.total
        for fn, (fr, fvt) in self.failed.items():
            if n >= fn and ratio >= fr and vt <= fvt:
                return False
        need = n - vt
        tentative: dict[Job, tuple[int, int]] = {}  # job -> (allocation, next candidate) if taken
        greedy: list[Running] = []
        while need > 0 and heap:
            negrel, k, at, v_ = heap[0]
            if v_ != ver[k]:
                heapq.heappop(heap)
                continue
            if k not in tentative and at != p.alloc[k]:  # its allocation changed: re-key it
                e = self._entry(k, p.alloc[k], self._next(k, self.ptr[k]))
                if e is None:
                    heapq.heappop(heap)
                else:
                    heapq.heapreplace(heap, e)
                continue
            if -negrel <= ratio:
                break  # taking anything would leave its job worse off than the waiting one
            heapq.heappop(heap)
            cur, i = tentative.get(k) or (at, self._next(k, self.ptr[k]))
            if i >= len(self.cands[k]):
                continue
            v = self.cands[k][i]
            greedy.append(v)
            need -= p.size[v.id]
            cur -= p.held[v.id]
            i = self._next(k, i + 1)
            tentative[k] = (cur, i)
            e = self._entry(k, cur, i)
            if e is not None:
                heapq.heappush(heap, e)
        ok = need <= 0 and p.preempt_for(req, greedy)
        # The jobs looked at go back as they now are (their tentative entries dropped).
        for k in tentative:
            ver[k] += 1
            self.ptr[k] = i = self._next(k, self.ptr[k])
            e = self._entry(k, p.alloc[k], i)
            if e is not None:
                heapq.heappush(heap, e)
        if not ok:
            old = self.failed.get(n)
            if old is None or (ratio <= old[0] and vt >= old[1]) or vt > old[1]:
                self.failed[n] = (ratio, vt)
        return ok


def _rel(alloc: float, share: float) -> float:
    """Allocation relative to the share (a job with no share is infinitely over it)."""
    if share > 0:
        return alloc / share
    return float("inf") if alloc > 0 else 0.0


def fair_share_queue_order(requests: Iterable[Request], running: Iterable[Running]) -> list[str]:
    """Job ids by (allocation per weight, earliest order): whom the next free slot goes to."""
    requests, running = list(requests), list(running)
    weight, _, first = _job_params(requests, running)
    held: dict[Job, int] = defaultdict(int)
    for r in running:
        if not r.preempting:
            held[r.job] += r.slots
    return sorted(weight, key=lambda j: (held[j] / weight[j], first[j], j))
