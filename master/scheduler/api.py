"""The entry points: one scheduling pass over one resource pool, and the queue order."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Sequence

from master.scheduler.engine import Pass
from master.scheduler.fair_share import fair_share_queue_order, run_fair_share
from master.scheduler.priority import priority_queue_order, run_priority
from master.scheduler.types import AgentView, Decision, PoolPolicy, Request, Running


def schedule(
    policy: PoolPolicy,
    requests: Sequence[Request],
    running: Sequence[Running],
    agents: Sequence[AgentView],
    *,
    span: bool = True,
) -> Decision:
    """One pass over ONE pool: which queued requests get which slots, whom to preempt, and why
    the others wait. Pure: reads its arguments, returns a Decision.

    - Assignments only use slots in `agents[*].free`, each at most once; a gang gets all of its
      slots or none (spanning agents only when no single agent has enough free, and only when
      `span`).
    - `preemptions` are Running ids; their slots are not reassigned in this pass (the trials must
      checkpoint and exit first). Pass them back as `Running(preempting=True)` until they are
      gone: the requests they were preempted for wait for them instead of preempting more.
    - Every request not assigned has a reason in `waiting`.
    """
    # A pass allocates many small objects and frees none of them: the cyclic garbage collector
    # would only walk the (large) inputs over and over. Paused for the pass.
    gc_on = gc.isenabled()
    gc.disable()
    try:
        p = Pass(policy, running, agents, span=span)
        if policy.type == "fair_share":
            run_fair_share(p, requests)
        else:
            run_priority(p, requests)
        return p.decision
    finally:
        if gc_on:
            gc.enable()


def queue_order(
    requests: Iterable[Request], running: Iterable[Running], policy: PoolPolicy | None = None
) -> list[str]:
    """Job ids (queued or holding slots) in the order the scheduler considers them."""
    if policy is not None and policy.type == "fair_share":
        return fair_share_queue_order(requests, running)
    return priority_queue_order(requests, running)
