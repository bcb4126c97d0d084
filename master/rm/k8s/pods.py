"""What a pod's status says about its part of an allocation (pure: a pod dict in)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from master.rm.k8s.manifest import ALLOCATION_LABEL


@dataclass(frozen=True)
class PodState:
    allocation: str | None
    name: str
    node: str | None
    rank: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown, or Deleted (gone from the API)
    exit_code: int | None = None
    reason: str | None = None  # why it waits or why it ended
    unschedulable: bool = False

    @property
    def exited(self) -> bool:
        return self.phase in ("Succeeded", "Failed", "Deleted")


def pod_state(pod: Mapping[str, Any], deleted: bool = False) -> PodState:
    md = pod.get("metadata") or {}
    st = pod.get("status") or {}
    ann = md.get("annotations") or {}
    rank = int(ann.get("batch.kubernetes.io/job-completion-index", 0) or 0)
    phase = st.get("phase") or "Pending"
    code: int | None = None
    reason: str | None = st.get("reason")
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "terminated" in state:
            code = int(state["terminated"].get("exitCode", 1))
            reason = reason or state["terminated"].get("reason")
        elif "waiting" in state:
            # ErrImagePull, CreateContainerConfigError...: the container will never start.
            reason = state["waiting"].get("reason") or reason
    unschedulable = False
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            unschedulable = c.get("reason") == "Unschedulable"
            reason = f"{c.get('reason')}: {c.get('message', '')}".strip(": ")
    if deleted and phase in ("Pending", "Running"):
        phase, reason = "Deleted", reason or "the pod was deleted"
    if phase == "Failed" and code is None:
        code = 137 if reason == "NodeLost" else 1
    return PodState(
        allocation=(md.get("labels") or {}).get(ALLOCATION_LABEL),
        name=md.get("name", ""),
        node=(pod.get("spec") or {}).get("nodeName"),
        rank=rank,
        phase=phase,
        exit_code=code,
        reason=reason,
        unschedulable=unschedulable,
    )
