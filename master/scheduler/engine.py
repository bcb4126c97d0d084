"""What both schedulers share: one pass over one pool's free slots.

Two slot indexes are kept in step:
- `free`: slots free right now; assignments come only from here, so a slot is never handed out
  twice (each assignment removes its slots from both indexes);
- `virt`: free slots plus the slots of trials that are stopping (preempted, not gone yet). A
  request that cannot be placed now but could be once those trials exit *claims* its slots in
  `virt` (and the free ones among them, so nothing smaller behind it takes them meanwhile). Claimed
  slots are not assigned in this pass: the next pass places the request for real.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from operator import attrgetter

from master.scheduler.acceptance import Eligible, eligible_for, nobody_runs, owner_name
from master.scheduler.fitting import Fit, SlotIndex
from master.scheduler.types import AgentView, Assignment, Decision, PoolPolicy, Request, Running

NO_ROOM, PLACED, BLOCKED = 0, 1, 2
_VALUE = attrgetter("priority", "order", "seq", "id")  # reversed: least valuable first


class Pass:
    def __init__(
        self,
        policy: PoolPolicy,
        running: Sequence[Running],
        agents: Sequence[AgentView],
        span: bool = True,
    ) -> None:
        if policy.type not in ("priority", "fair_share"):
            raise ValueError(f"unknown scheduler type {policy.type!r}")
        if policy.fitting_policy not in ("best", "worst"):
            raise ValueError(f"unknown fitting policy {policy.fitting_policy!r}")
        self.policy = policy
        self.worst = policy.fitting_policy == "worst"
        self.span = span
        self.decision = Decision()
        self.capacity = sum(a.total for a in agents)
        self.largest = max((a.total for a in agents), default=0)
        width = max((max(a.total, len(a.free)) for a in agents), default=0)
        self.free = SlotIndex(width)
        for a in agents:
            self.free.add_agent(a.id, a.free)
        self.virt = self.free.copy()
        self.any_agent = agents[0].id if agents else None
        # Agents that run only their own user's tasks: each owner's requests skip the ones that
        # would refuse them (acceptance.py). None in the usual pool: the filter then costs nothing.
        self.agents = agents
        self.restricted = any(a.only_uid is not None for a in agents)
        self._eligible: dict[int | None, Eligible] = {}
        self.running = running
        # Slots each running trial holds in all, and would free here (on agents of this pass).
        known = self.free.slots
        self.held: dict[str, int] = {}
        self.size: dict[str, int] = {}
        # Slots of stopping trials, by (agent, slot) -> trial id (to say whom a claim waits for).
        self.pending_owner: dict[tuple[str, int], str] = {}
        self.victims: set[str] = set()
        # Per job: slots it holds or will hold (max_slots), and its allocation for fair share
        # (stopping trials and victims do not count, new assignments and claims do).
        self.cap_used: dict[str, int] = defaultdict(int)
        self.alloc: dict[str, int] = defaultdict(int)
        for r in running:
            n = here = 0
            for agent_id, slots in r.placements:
                n += len(slots)
                if agent_id in known:
                    here += len(slots)
            self.held[r.id] = n
            self.size[r.id] = here
            job = r.job_id or r.id
            self.cap_used[job] += n
            if r.preempting:
                self._add_pending(r)
            else:
                self.alloc[job] += n
        self.fail_free = 1 << 30  # smallest gang that did not fit into `free` (which only shrinks)
        self._reasons: dict[tuple[int, str], str] = {}
        # Preemption candidates on each agent, least valuable first (built when first needed).
        self._on_agent: dict[str, list[tuple[Running, int]]] | None = None
        self._cands: list[Running] | None = None

    def waiting_for(self, n: int, why: str = "") -> str:
        """'waiting for n free slot(s)' + why (cached: thousands of requests may wait)."""
        r = self._reasons.get((n, why))
        if r is None:
            r = self._reasons[(n, why)] = f"waiting for {n} free slot(s){why}"
        return r

    # -- bookkeeping ------------------------------------------------------------------------

    def _add_pending(self, r: Running) -> None:
        for agent_id, slots in r.placements:
            for s in self.virt.add(agent_id, slots):
                self.pending_owner[(agent_id, s)] = r.id

    def assign(self, req: Request, fit: Fit) -> None:
        placements = []
        for agent_id, n in fit:
            slots = self.free.take(agent_id, n)
            self.virt.remove(agent_id, slots)
            placements.append((agent_id, slots))
        self.decision.assignments.append(Assignment(req.id, tuple(placements)))
        self.cap_used[req.job] += req.slots
        self.alloc[req.job] += req.slots

    def claim(self, req: Request, fit: Fit) -> int:
        """Reserve slots for a request that waits for stopping trials; returns how many trials."""
        owners: set[str] = set()
        for agent_id, n in fit:
            slots = self.virt.take(agent_id, n)
            self.free.remove(agent_id, slots)
            for s in slots:
                owner = self.pending_owner.pop((agent_id, s), None)
                if owner is not None:
                    owners.add(owner)
        self.cap_used[req.job] += req.slots
        self.alloc[req.job] += req.slots
        return len(owners)

    def wait(self, req: Request, reason: str) -> None:
        self.decision.waiting[req.id] = reason

    # -- one request --------------------------------------------------------------------------

    def place(self, req: Request) -> int:
        """`_place` on the agents that run the request's owner's tasks (all of them, unless some
        agent of the pool runs only its own user's tasks)."""
        if self.restricted:
            el = self._eligible.get(req.unix_uid)
            if el is None:
                el = self._eligible[req.unix_uid] = eligible_for(self.agents, req.unix_uid)
            if el.refusing:
                return self._place_on_eligible(req, el)
        return self._place(req)

    def _place_on_eligible(self, req: Request, el: Eligible) -> int:
        """Place with the refusing agents hidden from both indexes. Such a request does not
        preempt (the preemption search counts slots on every agent): it waits for free slots."""
        n = req.slots
        if el.first is None:
            self.wait(req, nobody_runs(req, self.agents, el.refusing))
            return BLOCKED
        who = f" on agents that run tasks of {owner_name(req)}"
        if n > (el.capacity if self.span else el.largest):
            have = f"{el.capacity} slots in all" if self.span else f"at most {el.largest} on one"
            self.wait(
                req, f"needs {n} slots; the agents that run tasks of {owner_name(req)} have {have}"
            )
            return BLOCKED
        saved = (self.capacity, self.largest, self.any_agent, self.fail_free)
        # fail_free says what did not fit into ALL free slots; a failure among fewer says nothing
        # about the rest, so this request starts afresh and the pass's value is restored after.
        self.capacity, self.largest, self.any_agent = el.capacity, el.largest, el.first
        self.fail_free = 1 << 30
        hidden = [(a, self.free.hide(a), self.virt.hide(a)) for a in el.refusing]
        try:
            out = self._place(req)
        finally:
            for a, free, virt in reversed(hidden):
                self.free.unhide(a, free)
                self.virt.unhide(a, virt)
            self.capacity, self.largest, self.any_agent, self.fail_free = saved
        if out == NO_ROOM:
            self.wait(req, self.waiting_for(n, who))
            return BLOCKED
        return out

    def _place(self, req: Request) -> int:
        """Assign the request free slots, or claim slots of stopping trials for it. Returns
        PLACED (either of those), BLOCKED (it waits, with a reason that holds for any request of
        its job as big as it for the rest of the pass) or NO_ROOM (not enough slots free or
        stopping: the caller may preempt, or says why it waits)."""
        n = req.slots
        if self.any_agent is None:
            self.wait(req, f"no agents in resource pool {req.pool!r}")
            return BLOCKED
        if n <= 0:
            agent_id = self.free.most_free() or self.any_agent
            self.decision.assignments.append(Assignment(req.id, ((agent_id, ()),)))
            return PLACED
        if self.span and n > self.capacity:
            self.wait(req, f"needs {n} slots; the pool has {self.capacity} in all")
            return BLOCKED
        if not self.span and n > self.largest:
            self.wait(
                req,
                f"needs {n} slots on one agent; the largest agent in pool {req.pool!r} "
                f"has {self.largest}",
            )
            return BLOCKED
        cap = req.max_slots
        if cap is not None:
            if n > cap:
                self.wait(req, f"needs {n} slots; job {req.job}'s max_slots is {cap}")
                return BLOCKED
            if self.cap_used[req.job] + n > cap:
                self.wait(req, f"job {req.job} is at its max_slots ({cap})")
                return BLOCKED
        if n >= self.fail_free and (
            self.virt.total == self.free.total or (self.span and n > self.virt.total)
        ):
            return NO_ROOM
        if n < self.fail_free:
            fit = self.free.fit(n, self.worst, self.span)
            if fit is not None:
                self.assign(req, fit)
                return PLACED
            self.fail_free = n
        if self.virt.total > self.free.total:  # some trials are stopping: wait for them?
            fit = self.virt.fit(n, self.worst, self.span)
            if fit is not None:
                k = self.claim(req, fit)
                self.wait(req, f"waiting for {k} preempted trial(s) to stop")
                return PLACED
        return NO_ROOM

    # -- preemption ---------------------------------------------------------------------------

    def candidates_on(self, agent_id: str) -> list[tuple[Running, int]]:
        """Preemptible trials with slots on this agent (and how many), least valuable first."""
        if self._on_agent is None:
            on: dict[str, list[tuple[Running, int]]] = defaultdict(list)
            for r in self.candidates():
                for a, slots in r.placements:
                    if slots:
                        on[a].append((r, len(slots)))
            self._on_agent = on
        return self._on_agent.get(agent_id, [])

    def candidates(self) -> list[Running]:
        """Preemptible running trials (not stopping already), least valuable first: lowest
        priority, then newest."""
        if self._cands is None:
            size = self.size
            self._cands = [
                r for r in self.running if r.preemptible and not r.preempting and size[r.id] > 0
            ]
            self._cands.sort(key=_VALUE, reverse=True)
        return self._cands

    def preempt_for(self, req: Request, greedy: list[Running], level: int | None = None) -> bool:
        """Preempt a subset of `greedy` (candidates, least valuable first) so that `req` can be
        placed once they exit, and claim its slots for it.

        Spanning: the fewest of `greedy` that still free enough (dropping the most valuable
        first). One agent is preferred when one of the agents `greedy` touches can hold the whole
        gang by preempting no more trials than that, using its own candidates of priority `level`
        or lower (least valuable first; with no level, only `greedy`). Returns False, preempting
        nothing, when neither works.
        """
        n = req.slots
        spanning: list[Running] = []
        if self.span:
            fewest = self._fewest_spanning(n, greedy)
            if fewest is None:
                return False
            spanning = fewest
        if len(spanning) == 1 and len(spanning[0].placements) == 1:
            # One victim whose agent then holds the whole gang: nothing does better.
            v = spanning[0]
            agent_id = v.placements[0][0]
            if self.virt.count(agent_id) + self.size[v.id] >= n:
                return self._commit(req, spanning, agent_id)
        best = self._best_one_agent(n, greedy, level)
        if best is not None and (not self.span or len(best[1]) <= len(spanning)):
            target, victims = best
        elif self.span and spanning:
            victims, target = spanning, None
        else:
            return False
        return self._commit(req, victims, target)

    def _fewest_spanning(self, n: int, greedy: list[Running]) -> list[Running] | None:
        """The fewest of `greedy` whose slots, with the free ones, make `n` (dropping the most
        valuable first), in `greedy`'s order; None when all of them are not enough."""
        size = self.size
        base = self.virt.total
        spanning: list[Running] = []
        freed = sum(size[v.id] for v in greedy)
        for v in reversed(greedy):
            sz = size[v.id]
            if base + freed - sz >= n:
                freed -= sz
            else:
                spanning.append(v)
        spanning.reverse()
        if base + freed < n:
            return None
        return spanning

    def _best_one_agent(
        self, n: int, greedy: list[Running], level: int | None
    ) -> tuple[str, list[Running]] | None:
        """Of the agents `greedy` touches, the one that holds `n` slots by preempting the
        fewest trials (then the best fit): (agent id, its victims), or None."""
        best: tuple[tuple[int, int], str, list[Running]] | None = None
        in_greedy = {v.id for v in greedy}
        free_on = self.virt.slots
        seen: set[str] = set()
        for v in greedy:
            for agent_id, slots in v.placements:
                if not slots or agent_id in seen or agent_id not in free_on:
                    continue
                seen.add(agent_id)
                found = self._victims_on(agent_id, n, greedy, in_greedy, level)
                if found is None:
                    continue
                chosen, left = found
                key = (len(chosen), -left if self.worst else left)
                if best is None or key < best[0]:
                    best = (key, agent_id, chosen)
        return None if best is None else (best[1], best[2])

    def _victims_on(
        self,
        agent_id: str,
        n: int,
        greedy: list[Running],
        in_greedy: set[str],
        level: int | None,
    ) -> tuple[list[Running], int] | None:
        """The trials to preempt so that `agent_id` holds `n` slots, and the slots left over
        then; None when it cannot. With no `level`, only `greedy`'s trials (in order, their slots
        on this agent); else the agent's own candidates of priority `level` or lower."""
        have = len(self.virt.slots[agent_id])
        taken = self.victims
        chosen: list[Running] = []
        if level is None:
            on = [(c, len(s)) for c in greedy for a, s in c.placements if a == agent_id]
        else:
            on = self.candidates_on(agent_id)
        for c, k in on:
            if have >= n or (level is not None and c.priority < level):
                break
            if c.id in taken:
                continue
            if level is not None or c.id in in_greedy:
                chosen.append(c)
                have += k
        if have < n:
            return None
        return chosen, have - n

    def _commit(self, req: Request, victims: list[Running], target: str | None) -> bool:
        n = req.slots
        for v in victims:
            self.victims.add(v.id)
            self.decision.preemptions.append(v.id)
            self.alloc[v.job] -= self.held[v.id]
            self._add_pending(v)
        if target is not None:
            fit: Fit | None = [(target, n)]
        else:
            fit = self.virt.fit(n, self.worst, self.span)
        assert fit is not None
        self.claim(req, fit)
        self.wait(req, f"preempting {len(victims)} trial(s) to make room")
        return True
