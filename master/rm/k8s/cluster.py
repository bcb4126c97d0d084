"""The long-lived side of one Kubernetes RM: the API client, the node and pod informers, the
pod-log followers, and the thread that applies pod changes to detlab's allocations.

One per (app, RM name), kept in `app.extensions`; started with the master's background work
(master/background.py) or at first use. Pod changes only mark their allocation dirty here; the
apply thread reads the dirty set under the master's state lock in an app context and goes
through the same writers as an agent's reports (allocation state, container exits, task logs).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from flask import Flask
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from master.rm.k8s.config import KubernetesConfig
from master.rm.k8s.events import WARNINGS_ABOUT_PODS, PodWarning, latest, pod_warning
from master.rm.k8s.informer import Informer
from master.rm.k8s.logs import LogFollower
from master.rm.k8s.manifest import ALLOCATION_LABEL, RM_LABEL, label_value
from master.rm.k8s.pods import PodState, pod_state
from master.rm.k8s.secrets import owner_patch

log = logging.getLogger("detlab.k8s")
_EXT = "detlab.k8s"
# Secrets are deleted with their Jobs; a sweep at start and then this often deletes those that
# outlived theirs (a master that died between the two, a delete that failed): one list call.
SWEEP_EVERY_S = 300.0
# Warnings kept for pods not (yet) known as detlab's before those are dropped.
MAX_WARNINGS = 10_000


@dataclass(frozen=True)
class AllocationObjects:
    """What one allocation creates in the cluster: its Job and the Secret its pods read."""

    job: dict[str, Any]
    secret: dict[str, Any]


def api_client(cfg: KubernetesConfig) -> client.ApiClient:
    """From kubeconfig_path, else the in-cluster service account (a master running as a pod)."""
    if cfg.kubeconfig_path:
        return config.new_client_from_config(config_file=cfg.kubeconfig_path)
    config.load_incluster_config()
    return client.ApiClient()


class KubernetesCluster:
    def __init__(self, app: Flask, name: str, cfg: KubernetesConfig, master_url: str) -> None:
        self.app, self.name, self.cfg, self.master_url = app, name, cfg, master_url
        self.api = api_client(cfg)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self._lock = threading.Lock()
        # allocation id -> pod name -> its latest state (a deleted pod stays, as Deleted, until
        # its allocation has been told).
        self.pods_by_alloc: dict[str, dict[str, PodState]] = {}
        self.unschedulable_since: dict[str, float] = {}
        self.told_waiting: set[str] = set()  # pods whose wait was written to their task's log
        self.dirty: set[str] = set()
        # allocation id -> its Job and Secret, created once the allocation is committed.
        self.pending_jobs: dict[str, AllocationObjects] = {}
        # When leftover Secrets were last deleted (jobs.py's sweep; 0: not yet, at start).
        self.swept_at = 0.0
        # After the API server refused a Secret or Job: no new allocation until `hold_until`
        # (time.monotonic), `backoff_s` doubling while the refusals go on (master/rm/backoff.py).
        self.backoff_s: float | None = None
        self.hold_until = 0.0
        self.wake = threading.Event()
        self.stop_event = threading.Event()
        self.nodes = Informer(
            "nodes", self.core.list_node, self._node_changed, watch_timeout=cfg.watch_timeout
        )
        # Every namespace: pods that are not detlab's take their requests off their nodes.
        self.pods = Informer(
            "pods",
            self.core.list_pod_for_all_namespaces,
            self._pod_changed,
            watch_timeout=cfg.watch_timeout,
        )
        # Warning events about pods in the namespace: why a pod waits or failed (events.py).
        self.events = Informer(
            "events",
            self.core.list_namespaced_event,
            self._event_changed,
            watch_timeout=cfg.watch_timeout,
            namespace=cfg.namespace,
            field_selector=WARNINGS_ABOUT_PODS,
        )
        self.warnings: dict[str, PodWarning] = {}  # pod name -> its latest Warning
        self.alloc_of_pod: dict[str, str] = {}
        self.told_events: dict[str, set[str]] = {}  # pod -> Events written to its task's log
        self.logs = LogFollower(self, cfg.log_followers)
        self._applier = threading.Thread(target=self._apply_loop, name=f"k8s-apply-{name}")
        self._applier.daemon = True
        self.on_capacity: Any = None  # set by the manager: request a scheduling pass

    def start(self) -> None:
        self.nodes.start()
        self.pods.start()
        self.events.start()
        self._applier.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        self.nodes.stop()
        self.pods.stop()
        self.events.stop()
        self.logs.stop()

    def synced(self, timeout: float = 10.0) -> bool:
        return self.nodes.wait_synced(timeout) and self.pods.wait_synced(timeout)

    # -- informer callbacks (watch threads: no app context, no database) --

    def _node_changed(self, kind: str, node: dict[str, Any]) -> None:
        if self.on_capacity is not None:
            self.on_capacity()

    def _pod_changed(self, kind: str, pod: dict[str, Any]) -> None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(RM_LABEL) != label_value(self.name):
            phase = (pod.get("status") or {}).get("phase")
            freed = kind == "DELETED" or phase in ("Succeeded", "Failed")
            if self.on_capacity is not None and freed:
                self.on_capacity()  # a foreign pod's requests came free
            return
        ps = pod_state(pod, deleted=kind == "DELETED")
        if ps.allocation is None:
            return
        with self._lock:
            self.pods_by_alloc.setdefault(ps.allocation, {})[ps.name] = ps
            self.alloc_of_pod[ps.name] = ps.allocation
            if ps.unschedulable:
                self.unschedulable_since.setdefault(ps.name, time.monotonic())
            else:
                self.unschedulable_since.pop(ps.name, None)
            self.dirty.add(ps.allocation)
        self.wake.set()

    def _event_changed(self, kind: str, event: dict[str, Any]) -> None:
        w = pod_warning(event) if kind != "DELETED" else None
        if w is None:
            return
        with self._lock:
            if len(self.warnings) > MAX_WARNINGS:  # other pods' (not detlab's) warnings go
                self.warnings = {p: x for p, x in self.warnings.items() if p in self.alloc_of_pod}
            self.warnings[w.pod] = latest(self.warnings.get(w.pod), w)
            aid = self.alloc_of_pod.get(w.pod)
            if aid is not None:
                self.dirty.add(aid)
        if aid is not None:
            self.wake.set()

    def warning(self, pod_name: str) -> PodWarning | None:
        with self._lock:
            return self.warnings.get(pod_name)

    def first_event(self, w: PodWarning) -> bool:
        """True the first time this Event is seen for its pod (it is logged once)."""
        with self._lock:
            told = self.told_events.setdefault(w.pod, set())
            if w.key in told:
                return False
            told.add(w.key)
            return True

    def take_dirty(self) -> set[str]:
        with self._lock:
            out, self.dirty = self.dirty, set()
            if self.unschedulable_since:  # deadlines to check even without a change
                out |= {
                    a
                    for a, pods in self.pods_by_alloc.items()
                    if any(p in self.unschedulable_since for p in pods)
                }
            return out

    def pod_states(self, alloc_id: str) -> list[PodState]:
        with self._lock:
            return sorted(self.pods_by_alloc.get(alloc_id, {}).values(), key=lambda p: p.rank)

    def forget(self, alloc_id: str) -> None:
        with self._lock:
            for name in self.pods_by_alloc.pop(alloc_id, {}):
                self.unschedulable_since.pop(name, None)
                self.told_waiting.discard(name)
                self.alloc_of_pod.pop(name, None)
                self.warnings.pop(name, None)
                self.told_events.pop(name, None)

    def first_wait(self, pod_name: str) -> bool:
        """True the first time a pod is found waiting (its reason is logged once)."""
        with self._lock:
            if pod_name in self.told_waiting:
                return False
            self.told_waiting.add(pod_name)
            return True

    def pending_for(self, pod_name: str) -> float:
        with self._lock:
            since = self.unschedulable_since.get(pod_name)
        return 0.0 if since is None else time.monotonic() - since

    # -- the apply thread --

    def _apply_loop(self) -> None:
        from master.rm.k8s.apply import apply_allocations
        from master.rm.k8s.jobs import create_pending_jobs, sweep_secrets

        while not self.stop_event.is_set():
            self.wake.wait(timeout=1.0)
            self.wake.clear()
            if time.monotonic() - self.swept_at > SWEEP_EVERY_S or not self.swept_at:
                self.swept_at = time.monotonic()
                try:
                    with self.app.app_context():
                        sweep_secrets(self)
                except Exception as e:  # noqa: BLE001 - the API or database is away (or RBAC
                    # refuses listing Secrets): once a minute, not at every wake-up
                    log.warning("k8s %s: deleting leftover Secrets failed: %s", self.name, e)
                    self.swept_at -= SWEEP_EVERY_S - 60.0
            dirty = self.take_dirty()
            with self._lock:
                jobs, self.pending_jobs = self.pending_jobs, {}
            if jobs:
                try:
                    with self.app.app_context():
                        create_pending_jobs(self, jobs)
                except Exception:  # noqa: BLE001 - the API or database is away: try again
                    log.exception("k8s %s: creating Jobs failed", self.name)
                    with self._lock:
                        self.pending_jobs = {**jobs, **self.pending_jobs}
            if not dirty:
                continue
            try:
                with self.app.app_context():
                    apply_allocations(self, dirty)
            except Exception:  # noqa: BLE001 - keep applying; the next change retries
                log.exception("k8s %s: applying pod changes failed", self.name)
                with self._lock:
                    self.dirty |= dirty

    # -- API calls --

    def create_objects(self, objs: AllocationObjects) -> None:
        """The Secret first (a pod that starts must find it), then the Job, then the Job made
        the Secret's owner. A Job that cannot be created takes its Secret back."""
        ns = self.cfg.namespace
        try:
            self.core.create_namespaced_secret(ns, objs.secret)
        except ApiException as e:
            if e.status != 409:  # 409: made by an earlier try that failed later on
                raise
        try:
            job = self.batch.create_namespaced_job(ns, objs.job, _preload_content=False)
        except ApiException as e:
            if e.status != 409:
                self.delete_secret(objs.secret["metadata"]["name"])
            raise
        try:
            self.core.patch_namespaced_secret(
                objs.secret["metadata"]["name"], ns, owner_patch(json.loads(job.data))
            )
        except ApiException as e:  # deleting the Job deletes it anyway (delete_job)
            log.warning("k8s %s: making the Job own its Secret failed: %s", self.name, e)

    def create_job_after_commit(self, alloc_id: str, objs: AllocationObjects) -> None:
        with self._lock:
            self.pending_jobs[alloc_id] = objs
        self.wake.set()

    def delete_job(self, name: str) -> None:
        """Delete a Job and (Background propagation) its pods, and its Secret; gone already is
        fine."""
        try:
            self.batch.delete_namespaced_job(
                name, self.cfg.namespace, propagation_policy="Background"
            )
        except ApiException as e:
            if e.status != 404:
                raise
        self.delete_secret(name)

    def delete_secret(self, name: str) -> None:
        try:
            self.core.delete_namespaced_secret(name, self.cfg.namespace)
        except ApiException as e:
            if e.status != 404:
                raise

    def secret_allocations(self) -> dict[str, str]:
        """This RM's Secrets: name -> the allocation label (one list call)."""
        resp = self.core.list_namespaced_secret(
            self.cfg.namespace,
            label_selector=f"{RM_LABEL}={label_value(self.name)}",
            _preload_content=False,
        )
        return {
            s["metadata"]["name"]: (s["metadata"].get("labels") or {}).get(ALLOCATION_LABEL, "")
            for s in json.loads(resp.data).get("items") or []
        }

    def alloc_selector(self, alloc_id: str) -> str:
        return f"{ALLOCATION_LABEL}={label_value(alloc_id)}"


def cluster_for(app: Flask, name: str, cfg: KubernetesConfig, master_url: str) -> KubernetesCluster:
    """The app's cluster object for RM `name`, started at first use."""
    clusters: dict[str, KubernetesCluster] = app.extensions.setdefault(_EXT, {})
    # Per app, like the clusters (dict.setdefault is one atomic step under the GIL).
    start_lock: threading.Lock = app.extensions.setdefault(f"{_EXT}.lock", threading.Lock())
    with start_lock:
        kc = clusters.get(name)
        if kc is None:
            kc = KubernetesCluster(app, name, cfg, master_url)
            clusters[name] = kc
            kc.start()
        return kc


def stop_clusters(app: Flask) -> None:
    for kc in list(app.extensions.get(_EXT, {}).values()):
        kc.stop()
