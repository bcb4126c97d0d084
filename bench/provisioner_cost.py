"""provisioner_cost: a week of a lab's demand in virtual time, detlab's scale decision against
Determined's rule, side by side (no cloud, no DB; the real `schedule()` places trials).

The trace (seeded): weekdays 9:00-19:00, two ASHA-like bursts a day (32 one-slot trials of
10 min to 160 min), six 2-slot trials of 30-120 min, one 4-slot overnight run of 8-14 h; nights
and weekends empty. Instances have 4 slots, boot in 4 min, go after 5 min idle, at most 10.
Every 30 s: the provisioner decides (on the queue as the last scheduling pass left it, plus new
submissions), then the scheduler places queued trials on ready instances (gangs on one
instance). Determined's rule launches ceil(pending slots / slots per instance) less the
instances still starting, without subtracting free capacity on connected instances.
"""

from __future__ import annotations

import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import Row, percentile, publish  # noqa: E402
from master.provisioner.decision import (  # noqa: E402
    InstanceView,
    PoolLimits,
    decide,
    determined_rule,
)
from master.scheduler import AgentView, PoolPolicy, Request, schedule  # noqa: E402

NAME = "provisioner_cost"
TICK = 30.0
WEEK = 7 * 24 * 3600.0
BOOT = 240.0
LIMITS = PoolLimits(
    min_instances=0, max_instances=10, instance_slots=4, max_idle=300.0, max_starting=1200.0
)


@dataclass
class Trial:
    id: str
    submit: float
    slots: int
    duration: float
    start: float | None = None
    held: tuple[int, ...] = ()  # the slot indexes it runs on


@dataclass
class Inst:
    id: str
    launched: float
    free: set[int] = field(default_factory=lambda: set(range(LIMITS.instance_slots)))
    running: dict[str, float] = field(default_factory=dict)  # trial id -> end time
    idle_since: float | None = None

    def ready(self, t: float) -> bool:
        return t - self.launched >= BOOT


def trace(seed: int = 3) -> list[Trial]:
    rng = random.Random(seed)
    out: list[Trial] = []

    def add(at: float, slots: int, duration: float) -> None:
        out.append(Trial(f"t{len(out)}", at, slots, duration))

    for day in range(5):  # Monday..Friday
        base = day * 86400.0
        for _ in range(2):
            at = base + rng.uniform(9, 18) * 3600
            for minutes in [10] * 24 + [40] * 6 + [160] * 2:
                add(at, 1, minutes * 60 * rng.uniform(0.8, 1.2))
        for _ in range(6):
            add(base + rng.uniform(9, 18) * 3600, 2, rng.uniform(30, 120) * 60)
        add(base + rng.uniform(17, 19) * 3600, 4, rng.uniform(8, 14) * 3600)
    return sorted(out, key=lambda x: x.submit)


def simulate(policy: str, trials: list[Trial]) -> dict:
    insts: dict[str, Inst] = {}
    queue: list[Trial] = []
    arrivals = list(trials)
    by_id = {x.id: x for x in trials}
    billed = idle = booting = 0.0
    n = 0
    peak = 0
    t = 0.0
    while t < WEEK or queue or any(i.running for i in insts.values()):
        # Trials that ended free their slots.
        for inst in insts.values():
            for tid, end in list(inst.running.items()):
                if end <= t:
                    del inst.running[tid]
                    inst.free.update(by_id[tid].held)
            if inst.ready(t) and not inst.running and inst.idle_since is None:
                inst.idle_since = t
        while arrivals and arrivals[0].submit <= t:
            queue.append(arrivals.pop(0))
        # The provisioner.
        pending = [Request(id=x.id, slots=x.slots, order=x.submit) for x in queue]
        if policy == "detlab":
            views = [
                InstanceView(
                    i.id,
                    launched_at=i.launched,
                    connected=i.ready(t),
                    free=tuple(sorted(i.free)) if i.ready(t) else (),
                    busy=bool(i.running),
                    idle_since=i.idle_since,
                )
                for i in insts.values()
            ]
            d = decide(LIMITS, views, pending, t)
            stop, launch = [i for i, _ in d.terminate], d.launch
        else:
            starting = sum(1 for i in insts.values() if not i.ready(t))
            launch = max(
                0,
                min(
                    determined_rule(LIMITS, len(insts), sum(x.slots for x in queue)) - starting,
                    LIMITS.max_instances - len(insts),
                ),
            )
            stop = []
            left = len(insts)
            for i in sorted(insts.values(), key=lambda i: i.idle_since or t):
                if (
                    not i.running
                    and i.idle_since is not None
                    and t - i.idle_since >= LIMITS.max_idle
                    and left > LIMITS.min_instances
                ):
                    stop.append(i.id)
                    left -= 1
        for iid in stop:
            assert not insts[iid].running
            del insts[iid]
        for _ in range(launch):
            n += 1
            insts[f"i{n}"] = Inst(f"i{n}", t)
        peak = max(peak, len(insts))
        # The scheduler: gangs on one ready instance.
        agents = [
            AgentView(i.id, "default", tuple(sorted(i.free)), LIMITS.instance_slots)
            for i in insts.values()
            if i.ready(t) and i.free
        ]
        if queue and agents:
            decision = schedule(PoolPolicy(), pending, [], agents, span=False)
            placed = set()
            for a in decision.assignments:
                ((agent_id, slots),) = a.placements
                x = by_id[a.request_id]
                inst = insts[agent_id]
                inst.free.difference_update(slots)
                inst.running[x.id] = t + x.duration
                inst.idle_since = None
                x.start = t
                x.held = slots
                placed.add(x.id)
            queue = [x for x in queue if x.id not in placed]
        # Billing for this tick.
        for i in insts.values():
            billed += TICK
            if not i.ready(t):
                booting += TICK
            elif not i.running:
                idle += TICK
        t += TICK
    waits = [x.start - x.submit for x in trials if x.start is not None]
    used = sum(x.slots * x.duration for x in trials)
    return {
        "instance_hours": billed / 3600,
        "idle_hours": idle / 3600,
        "boot_hours": booting / 3600,
        "slot_hours_used": used / 3600,
        "utilisation": used / (billed * LIMITS.instance_slots) if billed else 0.0,
        "launches": n,
        "peak": peak,
        "wait_median_s": statistics.median(waits),
        "wait_p95_s": percentile(waits, 95),
        "wait_mean_s": statistics.fmean(waits),
        "trials": len(waits),
    }


def run(docs: bool = True, seed: int = 3) -> bool:
    trials = trace(seed)
    results = {}
    for policy in ("detlab", "determined"):
        results[policy] = simulate(
            policy, [Trial(x.id, x.submit, x.slots, x.duration) for x in trials]
        )
    d, r = results["detlab"], results["determined"]
    rows: list[Row] = []

    def row(label: str, key: str, fmt: str) -> None:
        rows.append((label, f"{fmt.format(d[key])} vs {fmt.format(r[key])}", ""))

    row("instance-hours billed (detlab vs Determined's rule)", "instance_hours", "{:.1f} h")
    row("  of which idle (ready, running nothing)", "idle_hours", "{:.1f} h")
    row("  of which booting", "boot_hours", "{:.1f} h")
    row("slot-hours used by trials", "slot_hours_used", "{:.1f} h")
    row("utilisation (slot-hours used / slot-hours billed)", "utilisation", "{:.0%}")
    row("instances launched", "launches", "{}")
    rows.append(("peak instances at once", f"{d['peak']} vs {r['peak']}", "<= 10"))
    row("trial wait, median", "wait_median_s", "{:.0f} s")
    row("trial wait, p95", "wait_p95_s", "{:.0f} s")
    row("trial wait, mean", "wait_mean_s", "{:.0f} s")
    saved = 1 - d["instance_hours"] / r["instance_hours"] if r["instance_hours"] else 0.0
    rows.append(("instance-hours saved by detlab's decision", f"{saved:.0%}", "> 0"))
    summary = (
        f"A synthetic week (seed {seed}): {len(trials)} trials on weekdays, nothing at night or "
        "at the weekend; 4-slot instances booting in 4 min, reaped after 5 min idle, max 10; a "
        "30 s tick in virtual time. Determined's rule: ceil(pending slots / 4) less the "
        "instances still starting, free capacity on connected instances not subtracted."
    )
    publish(NAME, summary, rows, results, docs=docs)
    return d["instance_hours"] <= r["instance_hours"]


if __name__ == "__main__":
    sys.exit(0 if run(docs="--no-docs" not in sys.argv) else 1)
