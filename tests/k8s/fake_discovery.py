"""The fake API server's discovery documents: enough for `kubectl apply --dry-run=client` to map
the kinds of deploy/k8s/ to their resources (kubectl asks the server even in client mode)."""

from __future__ import annotations

from typing import Any

_ALL = ["create", "delete", "get", "list", "patch", "update", "watch"]

# group version -> (resource, kind, namespaced)
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("namespaces", "Namespace", False),
        ("nodes", "Node", False),
        ("pods", "Pod", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
        ("events", "Event", True),
        ("persistentvolumeclaims", "PersistentVolumeClaim", True),
    ],
    "batch/v1": [("jobs", "Job", True)],
    "apps/v1": [("deployments", "Deployment", True), ("statefulsets", "StatefulSet", True)],
    "rbac.authorization.k8s.io/v1": [
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
    ],
}


def _resource_list(gv: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": [
            {
                "name": name,
                "singularName": kind.lower(),
                "namespaced": namespaced,
                "kind": kind,
                "verbs": _ALL,
            }
            for name, kind, namespaced in RESOURCES[gv]
        ],
    }


def discovery(path: str) -> dict[str, Any] | None:
    """The document for a discovery path, or None when `path` is not one."""
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
            ],
        }
    if path == "/apis":
        groups = []
        for gv in RESOURCES:
            if "/" in gv:
                name, version = gv.split("/")
                ref = {"groupVersion": gv, "version": version}
                groups.append({"name": name, "versions": [ref], "preferredVersion": ref})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    if path == "/api/v1":
        return _resource_list("v1")
    if path.startswith("/apis/") and path.count("/") == 3 and path[6:] in RESOURCES:
        return _resource_list(path[6:])
    if path == "/version":
        return {"major": "1", "minor": "32", "gitVersion": "v1.32.0-fake"}
    return None
