"""Secrets in the fake API server (a mixin of FakeCluster, whose store and lock it uses).

Create (data base64, or stringData), get, list by label, merge-patch, delete; the garbage
collector's part for them (a Job deleted with Background or Foreground propagation takes the
Secrets it owns; with Orphan they lose the reference, as in Kubernetes); and the kubelet's part
(`valueFrom.secretKeyRef`: a missing Secret or key holds the container in
CreateContainerConfigError until the Secret appears, unless the reference is optional).
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
import uuid
from typing import Any

from tests.k8s.fake_objects import Conflict, NotFound, now

_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
MAX_SECRET_BYTES = 1024 * 1024  # Kubernetes' limit on a Secret's data


class MissingSecret(Exception):
    """A container's secretKeyRef names a Secret or key that does not exist."""


class Secrets:
    """Expects cond, objects, _key, _put, _record, _remove and _start from FakeCluster."""

    cond: Any
    objects: dict[tuple[str, str, str], dict[str, Any]]
    _key: Any
    _put: Any
    _record: Any
    _remove: Any
    _start: Any

    def create_secret(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            sec = copy.deepcopy(body)
            md = sec.setdefault("metadata", {})
            if not md.get("name"):
                raise ValueError("metadata.name: Required value")
            if self._key("Secret", ns, md["name"]) in self.objects:
                raise Conflict(f'secrets "{md["name"]}" already exists')
            data = dict(sec.get("data") or {})
            for k, v in (sec.pop("stringData", None) or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            size = 0
            for k, v in data.items():
                if not _KEY.match(k):
                    raise ValueError(
                        f"data[{k}]: a valid config key must consist of [-._a-zA-Z0-9]"
                    )
                try:
                    size += len(base64.b64decode(v, validate=True))
                except (binascii.Error, TypeError) as e:
                    raise ValueError(f"data[{k}]: illegal base64 data") from e
            if size > MAX_SECRET_BYTES:
                raise ValueError(f"data: Too long: must have at most {MAX_SECRET_BYTES} bytes")
            sec.update(kind="Secret", apiVersion="v1", data=data)
            sec.setdefault("type", "Opaque")
            md.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
            md.setdefault("labels", {})
            self._put(sec, "ADDED")
            self._containers_waiting_for_config()
            return copy.deepcopy(sec)

    def patch_secret(self, ns: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the Secret's metadata (labels, ownerReferences)."""
        with self.cond:
            sec = self.objects.get(self._key("Secret", ns, name))
            if sec is None:
                raise NotFound(f'secrets "{name}" not found')
            for k, v in (patch.get("metadata") or {}).items():
                if k in ("name", "namespace", "uid"):
                    raise ValueError(f"metadata.{k}: field is immutable")
                if v is None:
                    sec["metadata"].pop(k, None)
                elif isinstance(v, dict) and isinstance(sec["metadata"].get(k), dict):
                    sec["metadata"][k].update(v)
                else:
                    sec["metadata"][k] = copy.deepcopy(v)
            self._record("MODIFIED", sec)
            return copy.deepcopy(sec)

    def delete_secret(self, ns: str, name: str) -> dict[str, Any]:
        with self.cond:
            sec = self.objects.get(self._key("Secret", ns, name))
            if sec is None:
                raise NotFound(f'secrets "{name}" not found')
            self._remove(sec)
            return copy.deepcopy(sec)

    def secrets_owned_by(self, uid: str) -> list[dict[str, Any]]:
        return [
            o
            for (k, _, _), o in list(self.objects.items())
            if k == "Secret"
            and any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
        ]

    def collect_dependents(self, owner_uid: str, orphan: bool) -> None:
        """The garbage collector, for Secrets: deleted with their owner, or orphaned."""
        for sec in self.secrets_owned_by(owner_uid):
            if orphan:
                refs = sec["metadata"].get("ownerReferences") or []
                sec["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != owner_uid]
                self._record("MODIFIED", sec)
            else:
                self._remove(sec)

    def secret_value(self, ns: str, ref: dict[str, Any]) -> str | None:
        """What a secretKeyRef reads; None for a missing optional one; MissingSecret else."""
        name, key = str(ref.get("name")), str(ref.get("key"))
        sec = self.objects.get(self._key("Secret", ns, name))
        data = (sec or {}).get("data") or {}
        if key not in data:
            if ref.get("optional"):
                return None
            if sec is None:
                raise MissingSecret(f'secret "{name}" not found')
            raise MissingSecret(f"couldn't find key {key} in Secret {ns}/{name}")
        return base64.b64decode(data[key]).decode(errors="replace")

    def _containers_waiting_for_config(self) -> None:
        """A Secret came: the kubelet retries containers that waited for one."""
        for (k, _, _), pod in list(self.objects.items()):
            if k != "Pod" or pod["status"].get("phase") != "Pending":
                continue
            waiting = [
                (cs.get("state") or {}).get("waiting", {}).get("reason")
                for cs in pod["status"].get("containerStatuses") or []
            ]
            if "CreateContainerConfigError" in waiting:
                self._start(pod)
