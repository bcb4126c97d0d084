"""The master's background work on APScheduler: scheduling tick, agent reaper, timeouts."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime

from apscheduler.events import EVENT_JOB_SUBMITTED, JobSubmissionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from flask import Flask

from master.context import MasterState
from master.services.agent import heartbeats
from master.services.agent.agents import reap_lost_agents
from master.services.queue.scheduling import schedule_pass
from master.services.task.allocations import enforce_preemption_timeouts

log = logging.getLogger("detlab.jobs")


def _in_app(app: Flask, fn: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        try:
            with app.app_context():
                fn()
        except Exception:
            log.exception("job %s failed", fn.__name__)

    run.__name__ = fn.__name__
    return run


class TickStats:
    """How late each scheduling tick started (the 'tick on time' figure under load)."""

    def __init__(self, keep: int = 1000) -> None:
        self._lock = threading.Lock()
        self._lateness: deque[float] = deque(maxlen=keep)
        self.ticks = 0

    def record(self, event: JobSubmissionEvent) -> None:
        if event.job_id != "schedule" or not event.scheduled_run_times:
            return
        late = (datetime.now(UTC) - event.scheduled_run_times[-1]).total_seconds()
        with self._lock:
            self._lateness.append(max(0.0, late))
            self.ticks += 1

    def snapshot(self) -> dict:
        with self._lock:
            values = sorted(self._lateness)
        if not values:
            return {"ticks": 0}

        def pct(p: float) -> float:
            return values[min(len(values) - 1, int(p * len(values)))]

        return {
            "ticks": self.ticks,
            "lateness_ms_median": round(pct(0.5) * 1000, 2),
            "lateness_ms_p99": round(pct(0.99) * 1000, 2),
            "lateness_ms_max": round(values[-1] * 1000, 2),
        }


def start_jobs(app: Flask, state: MasterState) -> BackgroundScheduler:
    cfg = app.config["DET"]
    sched = BackgroundScheduler(daemon=True, job_defaults={"coalesce": True, "max_instances": 1})
    sched.add_job(
        _in_app(app, schedule_pass), "interval", seconds=cfg.scheduling_interval, id="schedule"
    )
    reap_every = max(0.5, min(5.0, cfg.agent_timeout / 4))
    sched.add_job(_in_app(app, reap_lost_agents), "interval", seconds=reap_every, id="reaper")
    sched.add_job(
        _in_app(app, enforce_preemption_timeouts),
        "interval",
        seconds=max(0.5, min(5.0, cfg.preemption_timeout / 4)),
        id="preemption_timeouts",
    )
    sched.add_job(_in_app(app, heartbeats.flush), "interval", seconds=1.0, id="heartbeats")
    from master.ckpt.gc import gc_tick

    sched.add_job(
        _in_app(app, gc_tick), "interval", seconds=cfg.checkpoint_gc_interval, id="checkpoint_gc"
    )
    if cfg.checkpoint_orphan_grace > 0:
        from master.ckpt.orphans import sweep_checkpoint_orphans

        sched.add_job(
            _in_app(app, sweep_checkpoint_orphans),
            "interval",
            seconds=cfg.checkpoint_orphan_interval,
            id="checkpoint_orphans",
        )
    from master.services.task.idle import reap_idle_tasks

    sched.add_job(
        _in_app(app, reap_idle_tasks), "interval", seconds=cfg.idle_check_interval, id="idle"
    )
    if any(p.provider is not None for p in cfg.resource_pools):
        from master.db import utcnow
        from master.provisioner.service import provision_pass

        state.provisioner.started = utcnow()
        # Launches and reaping (elastic agents); one pass at a time, cloud listing included.
        sched.add_job(_in_app(app, provision_pass), "interval", seconds=1.0, id="provisioner")
    if any(rm.type == "kubernetes" for rm in cfg.resource_managers):
        from master.rm.k8s.manager import start_kubernetes

        start_kubernetes(app)  # its watches run from the start: pods of live allocations too
    stats = TickStats()
    sched.add_listener(stats.record, EVENT_JOB_SUBMITTED)
    state.lifecycle.tick_stats = stats
    sched.start()
    return sched
