"""Creating the Jobs of new allocations once their scheduling pass has committed them.

The pass runs under the master's state lock and commits before releasing it, so under that same
lock an allocation is either committed (its Job is created now) or was rolled back (no Job: no pod
ever runs for an allocation the database does not know). Creating the Job inside the pass, before
its commit, let a fast pod ask the master for its model definition with a session token that was
not committed yet: 401, and the trial failed and spent a restart.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from kubernetes.client.rest import ApiException
from sqlalchemy import select

from detlab.protocol import ExitCause
from master.context import state_lock
from master.db import db
from master.models import Allocation
from master.rm.backoff import next_backoff
from master.rm.k8s.manifest import label_value
from master.services.queue.kicker import request_schedule
from master.services.task.tasks import allocation_exited
from master.services.trial.logs import write_line
from master.states import LIVE_ALLOCATION

if TYPE_CHECKING:
    from master.rm.k8s.cluster import AllocationObjects, KubernetesCluster

log = logging.getLogger("detlab.k8s")


def create_pending_jobs(kc: KubernetesCluster, jobs: dict[str, AllocationObjects]) -> None:
    """Create each committed, still live allocation's Job; one that cannot be created ends its
    allocation (the task queues again without spending a restart) and holds new allocations for
    a back-off, rather than retrying on every pass."""
    failed = False
    created = False
    with state_lock():
        for aid, objs in sorted(jobs.items()):
            alloc = db.session.get(Allocation, aid)
            if alloc is None or alloc.state not in LIVE_ALLOCATION:
                continue  # rolled back, or killed before its Job existed
            try:
                kc.create_objects(objs)
                created = True
            except ApiException as e:
                if e.status == 409:  # created by an earlier try that failed later on
                    continue
                if not failed:
                    kc.backoff_s = next_backoff(kc.backoff_s)
                    kc.hold_until = time.monotonic() + kc.backoff_s
                msg = (
                    f"cannot create its Kubernetes Secret and Job: {e.status} {e.reason}; "
                    f"back to the queue, asked again in {kc.backoff_s:g} s"
                )
                log.warning("k8s %s: allocation %s %s", kc.name, aid, msg)
                write_line(alloc, msg)
                allocation_exited(alloc, None, msg, ExitCause.POD_UNSCHEDULABLE)
                failed = True
        db.session.commit()
    if created and not failed:
        kc.backoff_s = None
    if failed:
        request_schedule()  # the requeued task shows its wait; nothing starts before the hold


def sweep_secrets(kc: KubernetesCluster) -> None:
    """Delete this RM's Secrets whose allocation is not live (their Job's deletion missed them:
    a master that died between creating the Secret and the Job, or a delete that failed)."""
    secrets = kc.secret_allocations()
    if not secrets:
        return
    live = {
        label_value(a)
        for a in db.session.execute(
            select(Allocation.id).where(Allocation.state.in_(LIVE_ALLOCATION))
        ).scalars()
    }
    db.session.rollback()  # a read: end its transaction
    for name, aid in sorted(secrets.items()):
        if aid not in live:
            log.info("k8s %s: deleting Secret %s (allocation %s is not live)", kc.name, name, aid)
            kc.delete_secret(name)
