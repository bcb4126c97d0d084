"""The `kubernetes` resource manager (master/rm/base.py's interface).

detlab's pure scheduler stays the authority on gangs, priority, fair share and preemption: the
pass asks `capacity` for each node's free slots (node watch minus pods detlab did not create
minus detlab's own allocations), and `start` creates one Job for an assignment, which the
scheduler makes only when the whole gang fits, so a gang is never half-placed. States, exits and
logs come back through the pod watch (cluster.py, apply.py), not through `refresh`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import Any

from flask import current_app
from kubernetes.client.rest import ApiException
from sqlalchemy import select

from master.db import db
from master.models import Allocation, Task, User
from master.rm.base import AllocationStatus, Placements
from master.rm.config import ResourceManagerConfig
from master.rm.k8s.capacity import free_slots
from master.rm.k8s.cluster import AllocationObjects, KubernetesCluster, cluster_for
from master.rm.k8s.config import KubernetesConfig
from master.rm.k8s.manifest import SPEC_ENV, JobRequest, job_manifest, job_name
from master.rm.k8s.podmerge import pool_pod_spec
from master.rm.k8s.secrets import SESSION_TOKEN_ENV, secret_manifest, split_secret_env
from master.scheduler import AgentView
from master.services.queue.kicker import request_schedule
from master.services.task.allocations import containers_of, new_allocation, request_preemption
from master.services.task.launch import start_spec
from master.services.task.tasks import task_pool
from master.states import LIVE_ALLOCATION, AllocationState, TaskType

log = logging.getLogger("detlab.k8s")


def _image(environment: dict[str, Any]) -> str | None:
    img = environment.get("image")
    if isinstance(img, dict):  # Determined's per-device form
        img = img.get("cuda") or img.get("gpu") or img.get("cpu")
    return img if isinstance(img, str) and img else None


class KubernetesResourceManager:
    type = "kubernetes"
    queues_itself = False

    def __init__(self, rm: ResourceManagerConfig) -> None:
        assert rm.kubernetes is not None
        self.name = rm.name
        self.cfg: KubernetesConfig = rm.kubernetes

    @property
    def cluster(self) -> KubernetesCluster:
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        det = app.config["DET"]
        master_url = self.cfg.master_url or f"http://{det.host}:{det.port}"
        kc = cluster_for(app, self.name, self.cfg, master_url)
        if kc.on_capacity is None:
            kc.on_capacity = _kicker(app)
        return kc

    def _pools(self) -> list[str]:
        return [
            p.name
            for p in current_app.config["DET"].resource_pools
            if p.resource_manager == self.name
        ]

    def _task_defaults(self, pool: str | None) -> dict[str, Any] | None:
        for p in current_app.config["DET"].resource_pools:
            if p.name == pool and p.resource_manager == self.name:
                return p.task_container_defaults
        return None

    def capacity(self, pools: set[str]) -> list[AgentView]:
        kc = self.cluster
        if time.monotonic() < kc.hold_until:  # the API server refused the last Secret or Job
            return []
        if not kc.synced(10.0):
            log.warning("k8s %s: nodes and pods not listed yet: no capacity", self.name)
            return []
        nodes = kc.nodes.objects()
        names = {(n.get("metadata") or {}).get("name") for n in nodes}
        used: dict[str, set[int]] = {}
        for alloc in db.session.execute(
            select(Allocation).where(Allocation.state.in_(LIVE_ALLOCATION))
        ).scalars():
            for node, c in containers_of(alloc).items():
                if node in names:
                    used.setdefault(node, set()).update(int(s) for s in c.get("slots") or ())
        pools_all = self._pools()
        return free_slots(self.cfg, self.name, nodes, kc.pods.objects(), used, pools, pools_all[0])

    def start(self, task: Task, placements: Placements) -> Allocation:
        """A new allocation and its Job: one pod per placed node, pinned there."""
        alloc = new_allocation(task, placements)
        chief = placements[0][0]
        spec = start_spec(alloc, chief)
        # Credentials go into the allocation's Secret, not the Job's spec (secrets.py).
        secret_names = {SESSION_TOKEN_ENV, *((task.spec or {}).get("service_env") or {})}
        public, secret = split_secret_env(spec.env, secret_names)
        spec = dataclasses.replace(spec, env=public)
        owner = db.session.get(User, task.owner_id) if task.owner_id is not None else None
        req = JobRequest(
            allocation_id=alloc.id,
            task_id=task.id,
            user=owner.username if owner is not None else "unknown",
            rm_name=self.name,
            nodes=tuple(node for node, _ in placements),
            slots_per_pod=max(len(slots) for _, slots in placements),
            env={
                SPEC_ENV: json.dumps(spec.to_json()),
                "DET_MASTER": self.cluster.master_url,
                "DET_K8S_SLOT_TYPE": self.cfg.slot_type,
            },
            pod_spec=pool_pod_spec(
                self._task_defaults(task_pool(task)),
                spec.environment.get("pod_spec"),
                gpu=self.cfg.slot_type == "cuda" and any(slots for _, slots in placements),
            ),
            image=_image(spec.environment),
            secret_keys=tuple(sorted(secret)),
        )
        # Not created here: the pass has not committed the allocation (and its session token)
        # yet, and a pod that starts at once would be refused by the master (401) and fail its
        # trial. The apply thread creates it once the commit is visible (cluster.py).
        job = job_manifest(self.cfg, req)
        md = job["metadata"]
        self.cluster.create_job_after_commit(
            alloc.id,
            AllocationObjects(
                job, secret_manifest(md["name"], md["namespace"], md["labels"], secret)
            ),
        )
        return alloc

    def preempt(self, alloc: Allocation) -> bool:
        """A trial gets detlab's preemption signal, checkpoints and exits (its Job is deleted
        once it has); a task without a harness cannot checkpoint: its Job goes now."""
        if not request_preemption(alloc, alloc.trial_id):
            return False
        if alloc.task.type != TaskType.TRIAL:
            self._delete(alloc)
        return True

    def kill(self, alloc: Allocation) -> None:
        alloc.kill_requested = True
        self._delete(alloc)

    def _delete(self, alloc: Allocation) -> None:
        try:
            self.cluster.delete_job(job_name(alloc.id))
        except ApiException as e:  # the pod watch still ends it when the API answers again
            log.warning("k8s %s: deleting the Job of %s failed: %s", self.name, alloc.id, e)

    def status(self, alloc: Allocation) -> AllocationStatus:
        return AllocationStatus(
            running=alloc.state == AllocationState.RUNNING,
            exited=alloc.state == AllocationState.TERMINATED,
            exit_code=alloc.exit_code,
            error=alloc.exit_reason,
        )

    def refresh(self) -> None:
        return None  # the pod watch pushes

    def release(self, alloc: Allocation) -> None:
        """The Job goes once its pods' output has been read (bounded), off the state lock."""
        kc, aid = self.cluster, alloc.id

        def later() -> None:
            kc.logs.drain(aid, 15.0)
            try:
                kc.delete_job(job_name(aid))
            except ApiException as e:  # its TTL removes it in the end
                log.warning("k8s %s: deleting the Job of %s failed: %s", kc.name, aid, e)

        threading.Thread(target=later, name=f"k8s-release-{aid}", daemon=True).start()


def _kicker(app: Any) -> Any:
    def kick() -> None:
        with app.app_context():
            request_schedule()

    return kick


def start_kubernetes(app: Any) -> None:
    """Start every Kubernetes RM's watches (the master's background work calls this)."""
    with app.app_context():
        for rm in app.config["DET"].resource_managers:
            if rm.type == "kubernetes":
                _ = KubernetesResourceManager(rm).cluster
