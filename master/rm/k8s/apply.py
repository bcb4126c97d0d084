"""Pod changes applied to detlab's allocations (in an app context, under the state lock).

What a pod's phase means is decided the way an agent's report is: a running pod starts its
container (and the allocation), an ended pod ends its container, and the allocation ends when
all have (`container_exited`, shared with the agent RM). A pod that stays Unschedulable past
`pending_timeout` withdraws the whole gang (its Job is deleted) and the task queues again without
spending a restart; a pod on a lost node ends as the agent-lost case: the trial restarts from its
latest checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from detlab.protocol import ExitCause
from detlab.text import clean_text
from master.context import master_state, state_lock
from master.db import db, utcnow
from master.models import Allocation, TaskLog
from master.rm.k8s.manifest import job_name
from master.services.agent.agents import container_exited
from master.services.queue.kicker import request_schedule
from master.services.task.allocations import containers_of, set_container
from master.services.task.tasks import allocation_exited
from master.services.transitions import set_allocation_state
from master.services.trial.logs import write_line
from master.states import AllocationState, ContainerState, container_state

if TYPE_CHECKING:
    from master.rm.k8s.cluster import KubernetesCluster
    from master.rm.k8s.pods import PodState


# A container waiting for one of these will not start by waiting longer.
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


def _ended(alloc: Allocation) -> bool:
    # A function, not an inline comparison: the state changes under mypy's narrowing.
    return alloc.state == AllocationState.TERMINATED


def apply_allocations(kc: KubernetesCluster, alloc_ids: set[str]) -> None:
    freed = False
    with state_lock():
        for aid in sorted(alloc_ids):
            freed |= _apply_one(kc, aid)
        db.session.commit()
    if freed:
        request_schedule()


def _withdraw(kc: KubernetesCluster, alloc: Allocation, ps: PodState) -> bool:
    waited = kc.pending_for(ps.name)
    kc.delete_job(job_name(alloc.id))
    w = kc.warning(ps.name)
    why = w.text() if w is not None else ps.reason
    msg = (
        f"pod {ps.name} stayed unschedulable for {waited:.0f}s ({why}): the whole gang is "
        "withdrawn and queues again"
    )
    write_line(alloc, msg)
    allocation_exited(alloc, None, msg, ExitCause.POD_UNSCHEDULABLE)
    return True


def _pod_exited(alloc: Allocation, ps: PodState, node: str) -> bool:
    err = None
    if ps.phase != "Succeeded":
        err = ps.reason or f"pod {ps.name} {ps.phase.lower()}"
    cause = ExitCause.AGENT_LOST if ps.reason == "NodeLost" else None
    code = None if ps.phase == "Deleted" else ps.exit_code
    return container_exited(alloc, node, code, err, cause)


def _after_end(kc: KubernetesCluster, aid: str, states: list[PodState]) -> None:
    if all(ps.exited for ps in states):
        kc.forget(aid)
    else:
        # Pods of an allocation that ended (or that this database never committed: a master
        # that died between creating the Job and its commit) would hold GPUs nobody counts.
        kc.delete_job(job_name(aid))


def _pending_warning(kc: KubernetesCluster, alloc: Allocation, ps: PodState) -> None:
    """A waiting pod's latest Warning event: once in the task's log, and the allocation's
    pending reason (what `det job list` shows) while it has not started."""
    w = kc.warning(ps.name)
    if w is None:
        return
    line = f"pod {ps.name}: {w.text()}"
    if kc.first_event(w) and not _logged(alloc, line):
        write_line(alloc, line)
    if alloc.state == AllocationState.ASSIGNED:
        master_state().scheduling.waiting_reasons[alloc.task_id] = line


def _logged(alloc: Allocation, line: str) -> bool:
    """Whether the task log has the master's line already (written before a master restart:
    the new master sees every event again when it lists them)."""
    owner = (
        TaskLog.trial_id == alloc.trial_id
        if alloc.trial_id is not None
        else TaskLog.task_id == alloc.task_id
    )
    found = db.session.execute(
        select(TaskLog.id)
        .where(owner, TaskLog.allocation_id == alloc.id, TaskLog.stream == "master")
        .where(TaskLog.line == clean_text(f"[master] {line}"))
        .limit(1)
    ).first()
    return found is not None


def _bound_pod(kc: KubernetesCluster, alloc: Allocation, ps: PodState, node: str) -> bool:
    """Apply one pod that runs (or ran) on `node`, a node of the allocation; True if it freed
    the allocation's slots."""
    now_in = container_state(containers_of(alloc)[node])
    if now_in == ContainerState.EXITED:
        return False
    if ps.phase == "Pending" and ps.reason in PULL_ERRORS:
        w = kc.warning(ps.name)
        err = f"pod {ps.name}: {ps.reason}" + (f" ({w.text()})" if w is not None else "")
        return container_exited(alloc, node, None, err, ExitCause.IMAGE_PULL_FAILED)
    if ps.phase == "Running" and now_in == ContainerState.ASSIGNED:
        set_container(alloc, node, started_at=utcnow().isoformat(), pod=ps.name)
        if alloc.state == AllocationState.ASSIGNED:
            set_allocation_state(
                alloc, AllocationState.RUNNING, f"pod {ps.name} started on node {node}"
            )
    if ps.phase in ("Running", "Succeeded", "Failed"):
        kc.logs.follow(alloc.id, ps.name, node)
    if ps.exited:
        return _pod_exited(alloc, ps, node)
    return False


def _apply_one(kc: KubernetesCluster, aid: str) -> bool:
    alloc = db.session.get(Allocation, aid)
    states = kc.pod_states(aid)
    if alloc is None or _ended(alloc):
        _after_end(kc, aid, states)
        return False
    freed = _apply_pods(kc, alloc, states)
    if alloc.state != AllocationState.ASSIGNED:  # its pods' waiting is over
        master_state().scheduling.waiting_reasons.pop(alloc.task_id, None)
    return freed


def _apply_pods(kc: KubernetesCluster, alloc: Allocation, states: list[PodState]) -> bool:
    aid = alloc.id
    freed = False
    for ps in states:
        if ps.phase == "Pending" and ps.reason and kc.first_wait(ps.name):
            write_line(alloc, f"pod {ps.name} waits: {ps.reason}")
        if ps.phase == "Pending":
            _pending_warning(kc, alloc, ps)
        if ps.node is None or ps.node not in containers_of(alloc):
            if ps.unschedulable and kc.pending_for(ps.name) > kc.cfg.pending_timeout:
                return _withdraw(kc, alloc, ps)
            continue
        freed |= _bound_pod(kc, alloc, ps, ps.node)
        if _ended(alloc):
            return True
    # Pods deleted before they were bound (a kill while the gang waited): nothing ran.
    every = len(states) >= len(containers_of(alloc))
    if every and all(ps.exited for ps in states) and not _ended(alloc):
        for node, c in containers_of(alloc).items():
            if container_state(c) != ContainerState.EXITED:
                freed |= container_exited(
                    alloc,
                    node,
                    None,
                    ExitCause.KILLED_BEFORE_START.message,
                    ExitCause.KILLED_BEFORE_START,
                )
    # One pod failed: the gang fails as one (the Job's backoffLimit 0 does it too).
    if not _ended(alloc) and any(c.get("kill") for c in containers_of(alloc).values()):
        kc.delete_job(job_name(aid))
    return freed
