"""The Secret that carries an allocation's credentials to its pods (pure: dicts in, dicts out).

A Job's pod template is readable by whoever may read Jobs (and pods) in the namespace; the
session token (and a notebook's or TensorBoard's own token) must not be: with it anyone could
act as the trial against the master. They go into one Secret per allocation, named and labelled
like its Job, and the pods read them through `valueFrom.secretKeyRef`. The Secret is deleted
with the Job (cluster.py deletes both; its ownerReference to the Job lets Kubernetes' garbage
collector remove it when the Job goes another way, such as its TTL), and a master that starts
deletes the Secrets of allocations that are no longer live (jobs.py).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

# Always secret; a command's `service_env` (a notebook's JUPYTER_TOKEN...) is secret as well.
SESSION_TOKEN_ENV = "DET_SESSION_TOKEN"


def split_secret_env(
    env: Mapping[str, str], secret_names: Iterable[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(what may be in the pod spec, what goes into the Secret)."""
    names = set(secret_names)
    public = {k: v for k, v in env.items() if k not in names}
    secret = {k: v for k, v in env.items() if k in names}
    return public, secret


def secret_manifest(
    name: str, namespace: str, labels: Mapping[str, str], data: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
    }


def secret_env_refs(name: str, keys: Iterable[str]) -> list[dict[str, Any]]:
    """The container's env entries that read each key of Secret `name`."""
    return [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": name, "key": k}}} for k in sorted(keys)
    ]


def owner_patch(job: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that makes the created Job the Secret's owner (garbage-collected with it)."""
    md = job.get("metadata") or {}
    return {
        "metadata": {
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": md.get("name", ""),
                    "uid": md.get("uid", ""),
                    "blockOwnerDeletion": False,
                    "controller": False,
                }
            ]
        }
    }
