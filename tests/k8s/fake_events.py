"""Events in the fake API server (a mixin of FakeCluster, whose store and lock it uses).

What the fake simulates, it reports as core/v1 Events about the pod, as the scheduler and the
kubelet do: Warning FailedScheduling (no node fits), Warning Failed (an image that cannot be
pulled, a Secret a container needs is missing), Normal Scheduled and Started. A repeat of the
same reason and message for the same pod is one Event whose `count` and `lastTimestamp` go up
(Kubernetes' event aggregation). Events are listed and watched like any kind, with
fieldSelector (`involvedObject.kind=Pod,type=Warning`).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from tests.k8s.fake_objects import now


class Events:
    """Expects cond, objects, _key, _put and _record from FakeCluster."""

    cond: Any
    objects: dict[tuple[str, str, str], dict[str, Any]]
    _key: Any
    _put: Any
    _record: Any

    def emit_event(
        self, obj: dict[str, Any], type_: str, reason: str, message: str, component: str
    ) -> dict[str, Any]:
        md = obj["metadata"]
        ns = md.get("namespace") or "default"
        with self.cond:
            for (k, n, _), ev in self.objects.items():
                io = ev["involvedObject"] if k == "Event" and n == ns else None
                if (
                    io
                    and io["uid"] == md["uid"]
                    and (ev["reason"], ev["message"])
                    == (
                        reason,
                        message,
                    )
                ):
                    ev["count"] += 1
                    ev["lastTimestamp"] = now()
                    self._record("MODIFIED", ev)
                    return copy.deepcopy(ev)
            at = now()
            ev = {
                "kind": "Event",
                "apiVersion": "v1",
                "metadata": {
                    "name": f"{md['name']}.{uuid.uuid4().hex[:16]}",
                    "namespace": ns,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": at,
                },
                "involvedObject": {
                    "kind": obj["kind"],
                    "namespace": ns,
                    "name": md["name"],
                    "uid": md["uid"],
                    "apiVersion": obj.get("apiVersion", "v1"),
                },
                "reason": reason,
                "message": message,
                "type": type_,
                "count": 1,
                "firstTimestamp": at,
                "lastTimestamp": at,
                "source": {"component": component},
                "reportingComponent": component,
            }
            self._put(ev, "ADDED")
            return copy.deepcopy(ev)

    def events_of(self, name: str) -> list[dict[str, Any]]:
        """A test hook: the Events about the object called `name`, oldest first."""
        with self.cond:
            return [
                copy.deepcopy(ev)
                for (k, _, _), ev in self.objects.items()
                if k == "Event" and ev["involvedObject"]["name"] == name
            ]
