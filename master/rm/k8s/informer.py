"""A list + watch cache of one kind of Kubernetes object (nodes, or detlab's pods).

List, then watch from the list's resourceVersion; every change goes to `on_change`. A watch the
server ends (its timeout) is reopened from the last version seen; a 410 Gone (the version fell
out of the server's history) re-lists, and the re-list reports every object again plus a
deletion for each that vanished meanwhile, so a broken watch loses nothing, only repeats. Other
errors back off and re-list. Objects are plain dicts (no model classes: cheaper at scale, and the
pure modules read dicts).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.rest import ApiException

log = logging.getLogger("detlab.k8s")

OnChange = Callable[[str, dict[str, Any]], None]  # (ADDED | MODIFIED | DELETED, object)


def _key(obj: dict[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


class Informer:
    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        on_change: OnChange,
        *,
        watch_timeout: int = 60,
        **list_kwargs: Any,
    ) -> None:
        self.name = name
        self._list_fn = list_fn
        self._kwargs = list_kwargs
        self._on_change = on_change
        self._watch_timeout = watch_timeout
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._watch: watch.Watch | None = None
        self.relists = 0
        self._thread = threading.Thread(target=self._run, name=f"k8s-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        w = self._watch
        if w is not None:
            w.stop()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def objects(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.values())

    def _relist(self) -> str:
        resp = self._list_fn(_preload_content=False, **self._kwargs)
        body = json.loads(resp.data)
        fresh = {_key(o): o for o in body.get("items") or []}
        with self._lock:
            gone = [o for k, o in self._objects.items() if k not in fresh]
            self._objects = fresh
        self.relists += 1
        for obj in gone:
            self._emit("DELETED", obj)
        for obj in fresh.values():
            self._emit("MODIFIED", obj)
        self._synced.set()
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            self._on_change(kind, obj)
        except Exception:  # noqa: BLE001 - one bad event must not end the watch
            log.exception("k8s %s: handling %s %s failed", self.name, kind, _key(obj))

    def _run(self) -> None:
        rv: str | None = None
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                rv = self._watch_from(rv)
                backoff = 0.5
            except ApiException as e:
                if e.status == 410:
                    log.info("k8s %s: watch version expired (410); re-listing", self.name)
                else:
                    log.warning("k8s %s: API error %s; re-listing", self.name, e.status)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                rv = None
            except Exception as e:  # noqa: BLE001 - network trouble: back off, re-list
                log.warning("k8s %s: watch failed (%s); re-listing", self.name, e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                rv = None

    def _watch_from(self, rv: str) -> str:
        # return_type "object": events carry plain dicts. (The client's deserialize=False would
        # too, but then it fails on the ERROR event that carries a 410.)
        w = watch.Watch(return_type="object")
        self._watch = w
        for ev in w.stream(
            self._list_fn,
            resource_version=rv,
            timeout_seconds=self._watch_timeout,
            **self._kwargs,
        ):
            if self._stop.is_set():
                break
            obj = ev.get("object") or {}
            kind = ev.get("type")
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            with self._lock:
                if kind == "DELETED":
                    self._objects.pop(_key(obj), None)
                else:
                    self._objects[_key(obj)] = obj
            self._emit(str(kind), obj)
        return rv
