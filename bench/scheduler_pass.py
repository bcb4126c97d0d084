"""scheduler_pass: one scheduling pass over a big pool, in memory (no master, no database).

10,000 queued trials (500 jobs of 20 trials; 1, 2, 4 or 8 slots per trial; mixed priorities,
weights and a few max_slots caps) and 1,000 agents of 8 slots, about three quarters of them held
by a few thousand running trials of the same jobs. Times `master.scheduler.schedule` for each
policy: median and p95 over repeated passes on the same inputs (the scheduler is pure). With
preemption the first pass is the worst case (thousands of victims at once); "the pass after" is
the next one, its assignments holding slots and its victims still stopping.

    python bench/scheduler_pass.py --profile    # where a preempting pass spends its time

`--profile` splits the two preempting passes into phases (CPU-time medians of repeated runs, so
that a shared machine's load shows less): setting up the pass (slot indexes, preemption
candidates), ordering the queue, the same pass without preemption, and what preemption adds,
per preempting request and per victim.
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import Row, percentile, publish  # noqa: E402
from master.scheduler import (  # noqa: E402
    AgentView,
    Decision,
    PoolPolicy,
    Request,
    Running,
    schedule,
)
from master.scheduler.engine import Pass  # noqa: E402

NAME = "scheduler_pass"
TARGET_MS = 50.0
POLICIES = {
    "priority": PoolPolicy("priority"),
    "priority + preemption": PoolPolicy("priority", preemption=True),
    "priority, worst fit": PoolPolicy("priority", fitting_policy="worst"),
    "fair_share": PoolPolicy("fair_share"),
    "fair_share + preemption": PoolPolicy("fair_share", preemption=True),
}


def build(
    n_requests: int = 10_000,
    n_jobs: int = 500,
    n_agents: int = 1_000,
    slots_per_agent: int = 8,
    used: float = 0.75,
    seed: int = 7,
) -> tuple[list[Request], list[Running], list[AgentView]]:
    rng = random.Random(seed)
    jobs = []
    for j in range(n_jobs):
        jobs.append(
            {
                "id": str(j + 1),
                "slots": rng.choice((1, 1, 2, 4, 8)),
                "priority": rng.choice((10, 30, 42, 42, 42, 60, 80)),
                "weight": rng.choice((0.5, 1.0, 1.0, 2.0)),
                "max_slots": 64 if rng.random() < 0.1 else None,
                "order": float(j),
            }
        )
    per_job = n_requests // n_jobs
    requests = [
        Request(
            id=f"q{j['id']}-{t}",
            job_id=j["id"],
            slots=j["slots"],
            priority=j["priority"],
            order=j["order"] + t * 1e-3,
            weight=j["weight"],
            max_slots=j["max_slots"],
        )
        for j in jobs
        for t in range(per_job)
    ]
    running: list[Running] = []
    agents: list[AgentView] = []
    for a in range(n_agents):
        aid = f"agent-{a:04d}"
        free = list(range(slots_per_agent))
        budget = int(slots_per_agent * used + rng.random() * 2 - 1)
        while budget > 0:
            j = rng.choice(jobs)
            if j["slots"] > min(budget, len(free)):
                j = rng.choice([x for x in jobs[:50] if x["slots"] == 1])
            n = j["slots"]
            slots, free = tuple(free[:n]), free[n:]
            budget -= n
            running.append(
                Running(
                    id=f"r{len(running)}",
                    job_id=j["id"],
                    placements=((aid, slots),),
                    priority=j["priority"],
                    order=j["order"] + rng.random(),
                    weight=j["weight"],
                    max_slots=j["max_slots"],
                )
            )
        agents.append(AgentView(aid, "default", tuple(free), slots_per_agent))
    return requests, running, agents


def next_pass(
    first: Decision, requests: list[Request], running: list[Running], agents: list[AgentView]
) -> tuple[list[Request], list[Running], list[AgentView]]:
    """The inputs of the pass after `first`: its assignments hold their slots, its victims are
    stopping (not gone yet)."""
    victims = set(first.preemptions)
    taken: dict[str, set[int]] = {}
    for a in first.assignments:
        for agent_id, slots in a.placements:
            taken.setdefault(agent_id, set()).update(slots)
    assigned = {a.request_id for a in first.assignments}
    by_id = {r.id: r for r in requests}
    running = [replace(r, preempting=True) if r.id in victims else r for r in running] + [
        Running(
            f"run-{rid}",
            by_id[rid].job_id,
            a.placements,
            priority=by_id[rid].priority,
            order=by_id[rid].order,
            weight=by_id[rid].weight,
            max_slots=by_id[rid].max_slots,
        )
        for a in first.assignments
        for rid in [a.request_id]
    ]
    agents = [
        replace(ag, free=tuple(s for s in ag.free if s not in taken.get(ag.id, ())))
        for ag in agents
    ]
    return [r for r in requests if r.id not in assigned], running, agents


def check(decision: Decision, agents: list[AgentView]) -> None:
    """No slot handed out twice or that was not free."""
    free = {(a.id, s) for a in agents for s in a.free}
    used = [(aid, s) for x in decision.assignments for aid, ss in x.placements for s in ss]
    assert len(used) == len(set(used)) and set(used) <= free, "over-allocation"


def _cpu_median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.disable()
        try:
            c0 = time.process_time()
            fn()
            times.append((time.process_time() - c0) * 1000)
        finally:
            gc.enable()
    return statistics.median(times)


def profile(repeat: int = 15) -> list[tuple[str, float]]:
    """Phases of the two preempting passes (CPU-time medians, ms); printed and returned."""
    requests, running, agents = build()
    out: list[tuple[str, float]] = []
    for label in ("priority + preemption", "fair_share + preemption"):
        policy = POLICIES[label]
        plain = PoolPolicy(policy.type, fitting_policy=policy.fitting_policy)

        def setup(policy: PoolPolicy = policy) -> None:
            Pass(policy, running, agents).candidates()

        decision = schedule(policy, requests, running, agents)
        preempting = sum(1 for w in decision.waiting.values() if w.startswith("preempting"))
        phases = {
            "setup (slot indexes + candidates)": _cpu_median_ms(setup, repeat),
            "ordering the queue (sort)": _cpu_median_ms(
                lambda: sorted(requests, key=attrgetter("priority", "order", "id")), repeat
            ),
            "whole pass without preemption": _cpu_median_ms(
                lambda plain=plain: schedule(plain, requests, running, agents), repeat
            ),
            "whole pass with preemption": _cpu_median_ms(
                lambda policy=policy: schedule(policy, requests, running, agents), repeat
            ),
        }
        added = phases["whole pass with preemption"] - phases["whole pass without preemption"]
        print(f"{label}: {preempting:,} preempting requests, {len(decision.preemptions):,} victims")
        for what, ms in phases.items():
            print(f"  {what:<40} {ms:7.1f} ms")
            out.append((f"{label}: {what}", ms))
        print(f"  {'preemption adds':<40} {added:7.1f} ms")
        if preempting:
            print(
                f"  {'  per preempting request':<40} {added / preempting * 1000:7.1f} us"
                f"\n  {'  per victim':<40} {added / len(decision.preemptions) * 1000:7.1f} us"
            )
        out.append((f"{label}: preemption adds", added))
    return out


def run(passes: int = 30, docs: bool = True) -> bool:
    requests, running, agents = build()
    free = sum(len(a.free) for a in agents)
    summary = (
        f"`schedule()` over one pool: {len(requests):,} queued trials of 500 jobs, "
        f"{len(agents):,} agents x 8 slots ({free:,} free), {len(running):,} running trials; "
        f"{passes} passes per policy on the same in-memory inputs (median, p95)."
    )
    rows: list[Row] = []
    raw: dict = {"requests": len(requests), "agents": len(agents), "running": len(running)}
    ok = True
    cases = [(label, policy, requests, running, agents) for label, policy in POLICIES.items()]
    for label in ("priority + preemption", "fair_share + preemption"):
        policy = POLICIES[label]
        nxt = next_pass(schedule(policy, requests, running, agents), requests, running, agents)
        cases.append((f"{label}, the pass after", policy, *nxt))
    for label, policy, reqs, runs, ags in cases:
        schedule(policy, reqs, runs, ags)  # warm-up
        times, cpu = [], []
        decision = Decision()
        for _ in range(passes):
            t0, c0 = time.perf_counter(), time.process_time()
            decision = schedule(policy, reqs, runs, ags)
            cpu.append((time.process_time() - c0) * 1000)
            times.append((time.perf_counter() - t0) * 1000)
        check(decision, ags)
        med, p95 = statistics.median(times), percentile(times, 95)
        ok = ok and med < TARGET_MS
        raw[label] = {
            "ms": times,
            "cpu_ms": cpu,
            "assigned": len(decision.assignments),
            "preempted": len(decision.preemptions),
            "waiting": len(decision.waiting),
        }
        rows.append(
            (
                f"{label}: median, p95 (CPU median)",
                f"{med:.1f} ms, {p95:.1f} ms ({statistics.median(cpu):.1f} ms)",
                f"median < {TARGET_MS:g} ms",
            )
        )
        rows.append(
            (
                f"{label}: outcome",
                f"{len(decision.assignments):,} assigned, {len(decision.preemptions):,} "
                f"preempted, {len(decision.waiting):,} waiting",
                "",
            )
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    summary += (
        f" Load average during the run: {load:.1f} (CPU time shown apart: the host is shared)."
    )
    publish(NAME, summary, rows, raw, docs=docs)
    return ok


if __name__ == "__main__":
    if "--profile" in sys.argv:
        profile()
        sys.exit(0)
    sys.exit(0 if run(docs="--no-docs" not in sys.argv) else 1)
