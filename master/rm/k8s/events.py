"""What a Warning event says about one of detlab's pods (pure: an Event dict in).

The pod watch shows a pod's phase and conditions; why it cannot go on is often only in an Event
(the scheduler's FailedScheduling, the kubelet's image pull or missing Secret). The RM watches
Warning events about pods in its namespace, keeps the latest per pod, writes each into the
task's log once (Determined 0.38 wrote its pods' events into the task log) and shows the latest
as the allocation's pending reason and in its exit reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What the events watch asks the API server for (fewer events to carry and keep).
WARNINGS_ABOUT_PODS = "involvedObject.kind=Pod,type=Warning"


@dataclass(frozen=True)
class PodWarning:
    pod: str
    reason: str
    message: str
    at: str  # RFC 3339 (lastTimestamp: an aggregated event's latest repeat)
    key: str  # the Event's name: one line in the task log per Event, whatever its count

    def text(self) -> str:
        return f"{self.reason}: {self.message}" if self.message else self.reason


def pod_warning(event: Mapping[str, Any]) -> PodWarning | None:
    """The warning, or None for an event that is not a Warning about a pod."""
    io = event.get("involvedObject") or {}
    if event.get("type") != "Warning" or io.get("kind") != "Pod" or not io.get("name"):
        return None
    md = event.get("metadata") or {}
    at = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or md.get("creationTimestamp")
        or ""
    )
    return PodWarning(
        pod=str(io["name"]),
        reason=str(event.get("reason") or "Warning"),
        message=" ".join(str(event.get("message") or "").split())[:1000],
        at=str(at),
        key=str(md.get("name") or ""),
    )


def latest(current: PodWarning | None, new: PodWarning) -> PodWarning:
    """The newer of two warnings; at a tie (timestamps are whole seconds) the one seen last."""
    return new if current is None or new.at >= current.at else current
