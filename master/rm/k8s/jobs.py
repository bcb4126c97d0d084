"""Creating the Jobs of new allocations once their scheduling pass has committed them.

The pass runs under the master's state lock and commits before releasing it, so under that same
lock an allocation is either committed (its Job is created now) or was rolled back (no Job: no pod
ever runs for an allocation the database does not know). Creating the Job inside the pass, before
its commit, let a fast pod ask the master for its model definition with a session token that was
not committed yet: 401, and the trial failed and spent a restart.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kubernetes.client.rest import ApiException

from detlab.protocol import ExitCause
from master.context import state_lock
from master.db import db
from master.models import Allocation
from master.services.queue.kicker import request_schedule
from master.services.task.tasks import allocation_exited
from master.services.trial.logs import write_line
from master.states import LIVE_ALLOCATION

if TYPE_CHECKING:
    from master.rm.k8s.cluster import KubernetesCluster

log = logging.getLogger("detlab.k8s")


def create_pending_jobs(kc: KubernetesCluster, jobs: dict[str, dict[str, Any]]) -> None:
    """Create each committed, still live allocation's Job; one that cannot be created ends its
    allocation (the task queues again without spending a restart)."""
    failed = False
    with state_lock():
        for aid, manifest in sorted(jobs.items()):
            alloc = db.session.get(Allocation, aid)
            if alloc is None or alloc.state not in LIVE_ALLOCATION:
                continue  # rolled back, or killed before its Job existed
            try:
                kc.create_job(manifest)
            except ApiException as e:
                if e.status == 409:  # created by an earlier try that failed later on
                    continue
                msg = f"cannot create its Kubernetes Job: {e.status} {e.reason}"
                log.warning("k8s %s: allocation %s %s", kc.name, aid, msg)
                write_line(alloc, msg)
                allocation_exited(alloc, None, msg, ExitCause.POD_UNSCHEDULABLE)
                failed = True
        db.session.commit()
    if failed:
        request_schedule()
