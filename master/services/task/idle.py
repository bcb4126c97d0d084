"""The idle reaper (an APScheduler job, master/background.py): every `idle_check_interval`
seconds, each running notebook is asked what it is doing (Jupyter's API, through the same
address and token the proxy uses), each shell and TensorBoard is judged by what went through the
proxy, and one idle for longer than its `idle_timeout` is killed like its owner would, freeing
its slot. One without a timeout is measured all the same: `GET /tasks` shows since when each is
idle (`ProxyMemory.idle_since`). The rules are pure (master/proxy/idle.py).

Jupyter is asked with `no_track_activity`, so the asking never counts as use. A notebook that
does not answer is left alone: the reaper never kills what it cannot see.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import datetime
from typing import Any

import requests
from sqlalchemy import select

from master.context import master_state
from master.db import db
from master.models import Agent, Task
from master.proxy.idle import JupyterView, idle_for, shell_idle_for, tensorboard_idle_for
from master.services.task.allocations import containers_of
from master.services.task.commands import kill_command
from master.services.task.tasks import live_allocation_of
from master.states import AllocationState, TaskState, TaskType

log = logging.getLogger(__name__)
ASK_TIMEOUT_S = 5.0


def _epoch(value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def ask_jupyter(base: str, token: str) -> JupyterView | None:
    """What a notebook's Jupyter says of itself; None when it does not answer."""
    headers = {"Authorization": f"token {token}"}
    params = {"no_track_activity": "1"}
    try:
        kernels = requests.get(
            base + "api/kernels", headers=headers, params=params, timeout=ASK_TIMEOUT_S
        )
        terminals = requests.get(
            base + "api/terminals", headers=headers, params=params, timeout=ASK_TIMEOUT_S
        )
        status = requests.get(base + "api/status", headers=headers, timeout=ASK_TIMEOUT_S)
    except requests.RequestException:
        return None
    if not (kernels.ok and status.ok):
        return None
    return JupyterView(
        kernels=tuple(kernels.json()),
        terminals=len(terminals.json()) if terminals.ok else 0,
        last_activity=_epoch(status.json().get("last_activity")),
    )


Candidate = tuple[str, TaskType, str, str, float, str, float]


def _candidates() -> list[Candidate]:
    """(task id, type, base URL, token, idle timeout, idle type, started) of each running
    notebook, shell or TensorBoard; without an idle timeout its timeout is infinite (it is
    measured, for the tasks listing's idle time, never reaped)."""
    out: list[Candidate] = []
    tasks = db.session.execute(
        select(Task).where(
            Task.type.in_((TaskType.NOTEBOOK, TaskType.SHELL, TaskType.TENSORBOARD)),
            Task.state == TaskState.ACTIVE,
        )
    ).scalars()
    for task in tasks:
        spec = task.spec or {}
        timeout = spec.get("idle_timeout") or math.inf
        alloc = live_allocation_of(task.id)
        if alloc is None or alloc.state != AllocationState.RUNNING:
            continue
        for agent_id, container in containers_of(alloc).items():
            agent = db.session.get(Agent, agent_id)
            port = container.get("proxy_port")
            if agent is None or not agent.address or not port:
                continue
            host = f"[{agent.address}]" if ":" in agent.address else agent.address
            started = _epoch(container.get("started_at")) or time.time()
            base = f"http://{host}:{port}/proxy/{task.id}/"
            out.append(
                (task.id, task.type, base, spec["service_token"], float(timeout),
                 spec.get("notebook_idle_type") or "kernels_or_terminals", started)
            )  # fmt: skip
    db.session.rollback()  # nothing held open while Jupyter is asked
    return out


def reap_idle_tasks() -> None:
    memory = master_state().proxy
    now = time.time()
    live = set()
    for task_id, kind, base, token, timeout, idle_type, started in _candidates():
        live.add(task_id)
        if kind == TaskType.TENSORBOARD:
            idle_type = "no request through the proxy"
            idle = tensorboard_idle_for(
                now=now, since=started, proxy_last=memory.activity.last(task_id)
            )
        elif kind == TaskType.SHELL:
            idle_type = "no session open"
            idle = shell_idle_for(
                memory.activity.open_sockets(task_id),
                now=now,
                since=started,
                proxy_last=memory.activity.last(task_id),
            )
        else:
            view = ask_jupyter(base, token)
            if view is None:
                continue
            if task_id not in memory.last_busy:
                # Its first answer: JupyterLab's own start-up (many seconds on a busy agent) is
                # not idleness, so the idle clock starts now (a notebook reaped before its user
                # could open it was a flaky test under load).
                memory.last_busy[task_id] = now
                continue
            idle = idle_for(
                idle_type,
                view,
                now=now,
                since=started,
                last_in_use=memory.last_busy.get(task_id, 0.0),
                proxy_last=memory.activity.last(task_id),
            )
        if idle == 0.0:
            memory.last_busy[task_id] = now
            memory.idle_since.pop(task_id, None)
            continue
        memory.idle_since[task_id] = now - idle
        if idle >= timeout:
            noun = kind.value.lower()
            log.info("%s %s idle for %.0f s (idle_timeout %g s)", noun, task_id, idle, timeout)
            kill_command(
                task_id,
                0,
                True,
                kind,
                f"idle for {idle:.0f} s (idle_timeout {timeout:g} s, {idle_type}): stopped",
            )
    for gone in set(memory.last_busy) - live:
        memory.last_busy.pop(gone, None)
    for gone in set(memory.idle_since) - live:
        memory.idle_since.pop(gone, None)
