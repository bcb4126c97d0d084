"""The state behind the fake Kubernetes API server: nodes, Jobs, Pods and a change history.

Every change gets the next resourceVersion and lands in a bounded history that watches replay
from; `compact()` drops the history, so a watch from an older version gets 410 Gone as it would
from a real API server after etcd compaction. Jobs create their pods; a one-pod-at-a-time
scheduler binds pending pods to nodes with room (as Kubernetes' default scheduler does: it knows
nothing of gangs); a bound pod's container command runs as a local process whose output is the
pod's log (fake_kubelet.py).
"""

from __future__ import annotations

import copy
import signal
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.k8s.fake_events import Events
from tests.k8s.fake_kubelet import Kubelet, _killpg, _later, _Proc
from tests.k8s.fake_objects import GPU, Conflict, NotFound, node_object, now, pod_requests, quantity
from tests.k8s.fake_secrets import Secrets

KINDS = ("Node", "Pod", "Job", "Event", "Secret")
HISTORY = 5000
INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass
class Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    kind: str
    obj: dict[str, Any]


@dataclass
class FakeCluster(Kubelet, Secrets, Events):
    grace_s: float = 5.0
    rv: int = 1
    history: list[Change] = field(default_factory=list)
    oldest_rv: int = 1  # a watch from a version below this gets 410 Gone
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    procs: dict[str, _Proc] = field(default_factory=dict)
    # Bumped by break_watches(): every open watch ends (the client then watches again).
    watch_epoch: int = 0
    # While True every request gets 503 (an API server outage); open streams go on.
    frozen: bool = False
    # Kinds every request for is refused with 403 (a service account's RBAC without them).
    forbidden: set[str] = field(default_factory=set)
    # While True pending pods stay unbound (the scheduler is slow): see release_binding().
    hold_binding: bool = False
    # False: bound pods are marked Running without a process (scale simulations).
    run_processes: bool = True
    # The handlers of the pod log streams (follow=true) open now, and the most open at once.
    log_readers: set[Any] = field(default_factory=set)
    max_log_streams: int = 0

    def __post_init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.api_calls: dict[str, int] = {}

    # -- the store --

    def _record(self, type_: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append(Change(self.rv, type_, obj["kind"], copy.deepcopy(obj)))
        if len(self.history) > HISTORY:
            dropped = self.history[: len(self.history) - HISTORY]
            self.history = self.history[len(dropped) :]
            self.oldest_rv = dropped[-1].rv + 1
        self.cond.notify_all()

    def _key(self, kind: str, ns: str, name: str) -> tuple[str, str, str]:
        return (kind, "" if kind == "Node" else ns, name)

    def get(self, kind: str, ns: str, name: str) -> dict[str, Any]:
        with self.cond:
            obj = self.objects.get(self._key(kind, ns, name))
            if obj is None:
                raise NotFound(f'{kind.lower()}s "{name}" not found')
            return copy.deepcopy(obj)

    def list(self, kind: str, ns: str | None) -> tuple[list[dict[str, Any]], int]:
        with self.cond:
            items = [
                copy.deepcopy(o)
                for (k, n, _), o in sorted(self.objects.items())
                if k == kind and (ns is None or kind == "Node" or n == ns)
            ]
            return items, self.rv

    def _put(self, obj: dict[str, Any], type_: str) -> None:
        md = obj["metadata"]
        self.objects[self._key(obj["kind"], md.get("namespace", ""), md["name"])] = obj
        self._record(type_, obj)

    def _remove(self, obj: dict[str, Any]) -> None:
        md = obj["metadata"]
        self.objects.pop(self._key(obj["kind"], md.get("namespace", ""), md["name"]), None)
        self._record("DELETED", obj)

    def changes_since(self, rv: int) -> list[Change] | None:
        """Changes after `rv`; None when the history no longer reaches back that far (410)."""
        with self.cond:
            if rv + 1 < self.oldest_rv:
                return None
            return [c for c in self.history if c.rv > rv]

    def compact(self) -> None:
        """Forget the history (etcd compaction): watches from before now get 410 Gone."""
        with self.cond:
            self.history.clear()
            self.oldest_rv = self.rv + 1

    def break_watches(self) -> None:
        with self.cond:
            self.watch_epoch += 1
            self.cond.notify_all()

    def count(self, what: str) -> None:
        with self.cond:
            self.api_calls[what] = self.api_calls.get(what, 0) + 1

    # -- nodes --

    def add_node(self, name: str, gpus: int = 0, cpus: float = 8) -> None:
        with self.cond:
            self._put(node_object(name, gpus, cpus, self.rv), "ADDED")
            self._schedule()

    def remove_node(self, name: str) -> None:
        """Node loss: the node goes, its pods fail (reason NodeLost) and their processes die."""
        with self.cond:
            node = self.objects.get(self._key("Node", "", name))
            if node is None:
                raise NotFound(f'nodes "{name}" not found')
            self._remove(node)
            for pod in self._pods(lambda p: p["spec"].get("nodeName") == name):
                proc = self.procs.get(self._pod_key(pod))
                if proc is not None:
                    proc.killed = True
                    _killpg(proc.popen, signal.SIGKILL)
                self._finish_pod(pod, 137, reason="NodeLost", message=f"node {name} was lost")

    # -- pods --

    def _pods(self, pred: Any = None) -> list[dict[str, Any]]:
        return [
            o
            for (k, _, _), o in list(self.objects.items())  # a dict keeps creation order
            if k == "Pod" and (pred is None or pred(o))
        ]

    @staticmethod
    def _pod_key(pod: dict[str, Any]) -> str:
        return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

    def create_pod(
        self, ns: str, body: dict[str, Any], owner: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        with self.cond:
            pod = copy.deepcopy(body)
            md = pod.setdefault("metadata", {})
            if not md.get("name"):
                if not md.get("generateName"):
                    raise ValueError("metadata.name or metadata.generateName is required")
                md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
            if self._key("Pod", ns, md["name"]) in self.objects:
                raise Conflict(f'pods "{md["name"]}" already exists')
            if not (pod.get("spec") or {}).get("containers"):
                raise ValueError("spec.containers: Required value")
            pod["kind"], pod["apiVersion"] = "Pod", "v1"
            md.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
            md.setdefault("labels", {})
            if owner is not None:
                md["ownerReferences"] = [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": owner["metadata"]["name"],
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                    }
                ]
            pod["status"] = {
                "phase": "Pending",
                "conditions": [],
                "qosClass": "BestEffort",
            }
            self._put(pod, "ADDED")
            if pod.get("spec", {}).get("nodeName"):  # bound by its author: the kubelet runs it
                pod["status"]["conditions"] = [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}
                ]
                self._start(pod)
            else:
                self._schedule()
            return copy.deepcopy(self.objects[self._key("Pod", ns, md["name"])])

    def _free(self) -> dict[str, dict[str, float]]:
        free = {
            o["metadata"]["name"]: {
                r: quantity(o["status"]["allocatable"].get(r, 0)) for r in ("cpu", GPU)
            }
            for (k, _, _), o in self.objects.items()
            if k == "Node"
        }
        for pod in self._pods(
            lambda p: p["spec"].get("nodeName") and p["status"]["phase"] in ("Pending", "Running")
        ):
            node = free.get(pod["spec"]["nodeName"])
            if node is not None:
                for r, q in pod_requests(pod).items():
                    node[r] = node.get(r, 0.0) - q
        return free

    def release_binding(self) -> None:
        with self.cond:
            self.hold_binding = False
            self._schedule()

    def _schedule(self) -> None:
        """Bind each unbound pending pod, oldest first, to the first node it fits on."""
        if self.hold_binding:
            return
        for pod in self._pods(
            lambda p: not p["spec"].get("nodeName") and p["status"]["phase"] == "Pending"
        ):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            need = pod_requests(pod)
            free = self._free()
            fits = [
                n
                for n, have in sorted(free.items())
                if all(have.get(r, 0.0) >= q - 1e-9 for r, q in need.items())
                and self._allowed(pod, self.objects[("Node", "", n)])
            ]
            if not fits:
                short = ", ".join(sorted(need)) or "resources"
                cond = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": f"0/{len(free)} nodes are available: insufficient {short}.",
                    "lastTransitionTime": now(),
                }
                if pod["status"]["conditions"] != [cond]:
                    pod["status"]["conditions"] = [cond]
                    self._record("MODIFIED", pod)
                    self.emit_event(
                        pod, "Warning", "FailedScheduling", cond["message"], "default-scheduler"
                    )
                continue
            pod["spec"]["nodeName"] = fits[0]
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}
            ]
            self._record("MODIFIED", pod)
            md = pod["metadata"]
            msg = f"Successfully assigned {md['namespace']}/{md['name']} to {fits[0]}"
            self.emit_event(pod, "Normal", "Scheduled", msg, "default-scheduler")
            self._start(pod)

    def _allowed(self, pod: dict[str, Any], node: dict[str, Any]) -> bool:
        """nodeSelector, required node affinity (matchExpressions with In) and required pod
        anti-affinity by hostname (matchLabels): the forms the detlab RM writes."""
        labels = node["metadata"]["labels"]
        spec = pod["spec"]
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return False
        aff = spec.get("affinity") or {}
        req = (aff.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        if req:
            terms = req.get("nodeSelectorTerms") or []
            if not any(
                all(
                    e.get("operator") == "In" and labels.get(e["key"]) in (e.get("values") or [])
                    for e in t.get("matchExpressions") or []
                )
                for t in terms
            ):
                return False
        anti = (aff.get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        for term in anti:
            want = (term.get("labelSelector") or {}).get("matchLabels") or {}
            for other in self._pods(
                lambda p: (
                    p["spec"].get("nodeName") == node["metadata"]["name"]
                    and p["status"]["phase"] in ("Pending", "Running")
                )
            ):
                if all(other["metadata"]["labels"].get(k) == v for k, v in want.items()):
                    return False
        return True

    def _finish_pod(
        self, pod: dict[str, Any], code: int, reason: str | None = None, message: str = ""
    ) -> None:
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        if reason:
            pod["status"]["reason"], pod["status"]["message"] = reason, message
        for cs in pod["status"].get("containerStatuses") or []:
            cs["ready"] = False
            cs["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "finishedAt": now(),
                }
            }
        self._record("MODIFIED", pod)
        self._job_progress(pod)
        self._schedule()

    def delete_pod(self, ns: str, name: str, grace_s: float | None = None) -> dict[str, Any]:
        with self.cond:
            pod = self.objects.get(self._key("Pod", ns, name))
            if pod is None:
                raise NotFound(f'pods "{name}" not found')
            proc = self.procs.get(self._pod_key(pod))
            running = (
                proc is not None
                and proc.popen.poll() is None
                and pod["status"]["phase"] == "Running"
            )
            if not running:
                self._remove(pod)
                return copy.deepcopy(pod)
            if not pod["metadata"].get("deletionTimestamp"):
                pod["metadata"]["deletionTimestamp"] = now()
                self._record("MODIFIED", pod)
                assert proc is not None
                _killpg(proc.popen, signal.SIGTERM)
                grace = self.grace_s if grace_s is None else grace_s
                _later(grace, _killpg, proc.popen, signal.SIGKILL)
            return copy.deepcopy(pod)

    def create_job(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            job = copy.deepcopy(body)
            md = job.setdefault("metadata", {})
            if not md.get("name"):
                raise ValueError("metadata.name: Required value")
            if self._key("Job", ns, md["name"]) in self.objects:
                raise Conflict(f'jobs.batch "{md["name"]}" already exists')
            spec = job.get("spec") or {}
            tmpl = spec.get("template") or {}
            if not (tmpl.get("spec") or {}).get("containers"):
                raise ValueError("spec.template.spec.containers: Required value")
            if (tmpl.get("spec") or {}).get("restartPolicy") not in ("Never", "OnFailure"):
                raise ValueError('spec.template.spec.restartPolicy: must be "Never" or "OnFailure"')
            job["kind"], job["apiVersion"] = "Job", "batch/v1"
            md.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
            md.setdefault("labels", {})
            job["status"] = {"active": 0, "succeeded": 0, "failed": 0, "startTime": now()}
            self._put(job, "ADDED")
            for i in range(int(spec.get("parallelism", 1))):
                pod = copy.deepcopy(tmpl)
                pmd = pod.setdefault("metadata", {})
                pmd["name"] = f"{md['name']}-{i}-{uuid.uuid4().hex[:5]}"
                pmd.setdefault("labels", {}).update(
                    {"job-name": md["name"], "controller-uid": md["uid"]}
                )
                pmd.setdefault("annotations", {})[INDEX] = str(i)
                if spec.get("completionMode") == "Indexed":  # as the Job controller does
                    for c in pod["spec"]["containers"]:
                        c.setdefault("env", []).append(
                            {"name": "JOB_COMPLETION_INDEX", "value": str(i)}
                        )
                self.create_pod(ns, pod, owner=job)
            job = self.objects[self._key("Job", ns, md["name"])]
            job["status"]["active"] = int(spec.get("parallelism", 1))
            self._record("MODIFIED", job)
            return copy.deepcopy(job)

    def _job_progress(self, pod: dict[str, Any]) -> None:
        ref = (pod["metadata"].get("ownerReferences") or [{}])[0]
        job = self.objects.get(self._key("Job", pod["metadata"]["namespace"], ref.get("name", "")))
        if job is None or job["metadata"]["uid"] != ref.get("uid"):
            return
        st = job["status"]
        key = "succeeded" if pod["status"]["phase"] == "Succeeded" else "failed"
        st[key] = st.get(key, 0) + 1
        st["active"] = max(0, st.get("active", 0) - 1)
        spec = job["spec"]
        done = None
        if st["failed"] > int(spec.get("backoffLimit", 6)):
            done = "Failed"
        elif st["succeeded"] >= int(spec.get("completions", 1)):
            done = "Complete"
        if done and not st.get("conditions"):
            st["conditions"] = [{"type": done, "status": "True", "lastTransitionTime": now()}]
            st["completionTime"] = now()
            # backoffLimit 0: the Job controller ends the gang's other pods at the first failure.
            if done == "Failed":
                for other in self._pods(
                    lambda p: (
                        (p["metadata"].get("ownerReferences") or [{}])[0].get("uid")
                        == job["metadata"]["uid"]
                        and p["status"]["phase"] in ("Pending", "Running")
                    )
                ):
                    self.delete_pod(other["metadata"]["namespace"], other["metadata"]["name"], 0)
            ttl = spec.get("ttlSecondsAfterFinished")
            if ttl is not None:
                ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
                _later(float(ttl), self._ttl_delete, ns, name, job["metadata"]["uid"])
        self._record("MODIFIED", job)

    def _ttl_delete(self, ns: str, name: str, uid: str) -> None:
        try:
            if self.get("Job", ns, name)["metadata"]["uid"] == uid:
                self.delete_job(ns, name, "Background")
        except NotFound:
            pass

    def delete_job(self, ns: str, name: str, propagation: str | None) -> dict[str, Any]:
        """Delete a Job; its pods go too unless the policy is Orphan (the API's default for
        batch/v1 Jobs, which is why callers must say Background or Foreground)."""
        with self.cond:
            job = self.objects.get(self._key("Job", ns, name))
            if job is None:
                raise NotFound(f'jobs.batch "{name}" not found')
            self._remove(job)
            uid = job["metadata"]["uid"]
            self.collect_dependents(uid, orphan=propagation not in ("Background", "Foreground"))
            if propagation in ("Background", "Foreground"):
                for pod in self._pods(
                    lambda p: (p["metadata"].get("ownerReferences") or [{}])[0].get("uid") == uid
                ):
                    self.delete_pod(ns, pod["metadata"]["name"])
            return copy.deepcopy(job)

    def close(self) -> None:
        with self.cond:
            procs = list(self.procs.values())
        for p in procs:
            _killpg(p.popen, signal.SIGKILL)
            try:
                p.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
