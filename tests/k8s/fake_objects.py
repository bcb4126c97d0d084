"""Pure helpers of the fake Kubernetes API server: quantities, label selectors, object shapes.

Kept apart from the server (fake_apiserver.py) and its state (fake_cluster.py) so that what a
pod asks for and what a selector matches can be tested without HTTP.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

GPU = "nvidia.com/gpu"


class Conflict(Exception):
    """409: the object exists already."""


class NotFound(Exception):
    """404: no such object."""


_SUFFIXES = {
    "m": 0.001,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 1024.0,
    "Mi": 1024.0**2,
    "Gi": 1024.0**3,
    "Ti": 1024.0**4,
}


def quantity(raw: Any) -> float:
    """A Kubernetes quantity ("500m", "2", "4Gi") as a number; ValueError on anything else."""
    s = str(raw).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(s)


def pod_requests(pod: dict[str, Any]) -> dict[str, float]:
    """What a pod needs of a node: each container's requests, its limits where it requests
    nothing (Kubernetes defaults requests to limits, and extended resources such as GPUs are
    only ever given as limits)."""
    need: dict[str, float] = {}
    for c in pod.get("spec", {}).get("containers") or []:
        res = c.get("resources") or {}
        merged = dict(res.get("limits") or {})
        merged.update(res.get("requests") or {})
        for name, q in merged.items():
            if name in ("cpu", GPU):
                need[name] = need.get(name, 0.0) + quantity(q)
    return need


def parse_selector(raw: str | None) -> list[tuple[str, str, str | None]]:
    """`a=b,c!=d,e` as (key, op, value) triples (the equality forms the detlab RM uses)."""
    out: list[tuple[str, str, str | None]] = []
    for part in (raw or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "!=" in part:
            k, v = part.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "==" in part or "=" in part:
            k, v = part.replace("==", "=").split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        elif part.startswith("!"):
            out.append((part[1:].strip(), "!", None))
        else:
            out.append((part, "exists", None))
    return out


def matches(labels: dict[str, str], selector: list[tuple[str, str, str | None]]) -> bool:
    for key, op, value in selector:
        have = labels.get(key)
        if op == "=" and have != value:
            return False
        if op == "!=" and have == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!" and key in labels:
            return False
    return True


def field_value(obj: dict[str, Any], path: str) -> str:
    """`involvedObject.kind` of an object, as a field selector reads it ("" when absent)."""
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def field_matches(obj: dict[str, Any], selector: list[tuple[str, str, str | None]]) -> bool:
    """A fieldSelector (`a.b=c,d!=e`, parsed by parse_selector) on the object's fields."""
    for key, op, value in selector:
        have = field_value(obj, key)
        if (op == "=" and have != value) or (op == "!=" and have == value):
            return False
    return True


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A `Status` object, as the API server answers errors (and a watch's ERROR event)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }


def node_object(name: str, gpus: int, cpus: float, rv: int) -> dict[str, Any]:
    alloc = {"cpu": f"{cpus:g}", GPU: str(gpus), "memory": "64Gi", "pods": "110"}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"node-{name}",
            "resourceVersion": str(rv),
            "creationTimestamp": now(),
            "labels": {"kubernetes.io/hostname": name},
        },
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }
