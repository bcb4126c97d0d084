"""A fake Kubernetes API server: real HTTP on 127.0.0.1, enough of the REST API for the official
`kubernetes` client and the detlab Kubernetes RM.

    GET    /api/v1/nodes[?watch=true&resourceVersion=N]      list / watch nodes
    DELETE /api/v1/nodes/NAME                                node loss (its pods fail)
    GET    /api/v1/[namespaces/NS/]pods[?labelSelector=..&watch=true&resourceVersion=N]
    POST   /api/v1/namespaces/NS/pods                        a pod not created by detlab
    GET    /api/v1/namespaces/NS/pods/NAME[/log]             one pod, its log
    DELETE /api/v1/namespaces/NS/pods/NAME
    GET|POST /api/v1/namespaces/NS/secrets[?labelSelector=..]    (GET /api/v1/secrets: all)
    GET|PATCH|DELETE /api/v1/namespaces/NS/secrets/NAME      (PATCH: a merge patch of metadata)
    GET    /api/v1/[namespaces/NS/]events[?fieldSelector=..&watch=true]   list / watch
    POST   /apis/batch/v1/namespaces/NS/jobs                 a Job: its pods are created at once
    GET    /apis/batch/v1/[namespaces/NS/]jobs[/NAME]        list / watch / one
    DELETE /apis/batch/v1/namespaces/NS/jobs/NAME            propagationPolicy: body or query

Lists and watches take labelSelector and fieldSelector (equality forms). A watch replays the
changes after its resourceVersion and then streams new ones (chunked JSON lines) until
timeoutSeconds; a resourceVersion older than the kept history gets an ERROR event with a 410
Status, as from a real server after compaction. State and pod processes:
fake_cluster.py. `FakeApiServer.kubeconfig()` writes a kubeconfig pointing at it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from tests.k8s.fake_cluster import Conflict, FakeCluster, NotFound
from tests.k8s.fake_discovery import discovery
from tests.k8s.fake_objects import field_matches, matches, parse_selector, status

_ROUTES = [
    (re.compile(r"^/api/v1/nodes$"), "Node", "collection"),
    (re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$"), "Node", "item"),
    (re.compile(r"^/api/v1/pods$"), "Pod", "collection"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$"), "Pod", "collection"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$"), "Pod", "item"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$"), "Pod", "log"),
    (re.compile(r"^/api/v1/events$"), "Event", "collection"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$"), "Event", "collection"),
    (re.compile(r"^/api/v1/secrets$"), "Secret", "collection"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/secrets$"), "Secret", "collection"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/secrets/(?P<name>[^/]+)$"), "Secret", "item"),
    (re.compile(r"^/apis/batch/v1/jobs$"), "Job", "collection"),
    (re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs$"), "Job", "collection"),
    (re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs/(?P<name>[^/]+)$"), "Job", "item"),
]
_CREATE = {"Pod": "create_pod", "Job": "create_job", "Secret": "create_secret"}
_LIST_KIND = {
    "Node": ("NodeList", "v1"),
    "Pod": ("PodList", "v1"),
    "Job": ("JobList", "batch/v1"),
    "Event": ("EventList", "v1"),
    "Secret": ("SecretList", "v1"),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        return None

    # -- plumbing --

    def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, reason: str, message: str) -> None:
        self._send(code, status(code, reason, message))

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def _route(self) -> tuple[str, str, dict[str, str], dict[str, str]] | None:
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        for rx, kind, what in _ROUTES:
            m = rx.match(url.path)
            if m:
                return kind, what, m.groupdict(), q
        return None

    def _dispatch(self, method: str) -> None:
        fc = self.server.cluster
        doc = discovery(urlsplit(self.path).path) if method == "GET" else None
        if doc is not None:
            self._send(200, doc)
            return
        route = self._route()
        if route is None:
            self._error(
                404, "NotFound", f"the server could not find the requested resource {self.path}"
            )
            return
        kind, what, parts, q = route
        watching = (q.get("watch") or "").lower() in ("true", "1")
        fc.count(f"{method} {kind} {what}{' watch' if watching else ''}")
        if self.server.token and self.headers.get("Authorization") != f"Bearer {self.server.token}":
            self._error(401, "Unauthorized", "Unauthorized")
            return
        if fc.frozen:
            self._error(503, "ServiceUnavailable", "the fake API server is frozen by the test")
            return
        if kind in fc.forbidden:  # RBAC that does not grant this kind
            self._error(403, "Forbidden", f"{kind.lower()}s is forbidden: the test's RBAC")
            return
        ns, name = parts.get("ns"), parts.get("name", "")
        try:
            if method == "GET" and what == "collection":
                if watching:
                    self._watch(kind, ns, q)
                else:
                    self._list(kind, ns, q)
            elif method == "GET" and what == "item":
                self._send(200, fc.get(kind, ns or "", name))
            elif method == "GET" and what == "log":
                self._log(ns or "", name, q)
            elif method == "POST" and what == "collection" and kind in _CREATE:
                self._send(201, getattr(fc, _CREATE[kind])(ns or "", self._body()))
            elif method == "PATCH" and what == "item" and kind == "Secret":
                if "json-patch" in (self.headers.get("Content-Type") or ""):
                    self._error(415, "UnsupportedMediaType", "only merge patches are served")
                    return
                self._send(200, fc.patch_secret(ns or "", name, self._body()))
            elif method == "DELETE" and what == "item":
                body = self._body()
                if kind == "Job":
                    policy = body.get("propagationPolicy") or q.get("propagationPolicy")
                    self._send(200, fc.delete_job(ns or "", name, policy))
                elif kind == "Pod":
                    self._send(200, fc.delete_pod(ns or "", name, body.get("gracePeriodSeconds")))
                elif kind == "Secret":
                    self._send(200, fc.delete_secret(ns or "", name))
                else:
                    fc.remove_node(name)
                    self._send(200, status(200, "", ""))
            else:
                self._error(405, "MethodNotAllowed", f"{method} is not supported on {self.path}")
        except NotFound as e:
            self._error(404, "NotFound", str(e))
        except Conflict as e:
            self._error(409, "AlreadyExists", str(e))
        except (ValueError, KeyError, TypeError) as e:
            self._error(422, "Invalid", str(e))

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    # -- logs --

    def _log(self, ns: str, name: str, q: dict[str, str]) -> None:
        """A pod's output; follow=true streams it until the container's output ends."""
        fc = self.server.cluster
        stamps = (q.get("timestamps") or "").lower() == "true"
        since = None
        if q.get("sinceSeconds"):
            at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=float(q["sinceSeconds"]))
            since = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

        def render(lines: list[tuple[str, bytes]]) -> bytes:
            return b"".join((f"{ts} ".encode() if stamps else b"") + ln + b"\n" for ts, ln in lines)

        lines, done = fc.pod_log(ns, name, 0, since)
        if (q.get("follow") or "").lower() != "true":
            self._send(200, render(lines), "text/plain")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")  # see _watch
        self.end_headers()
        sent = 0
        with fc.cond:  # how many follow streams are open at once (tests bound it)
            # A stream whose client has closed it counts no more, even before its thread
            # notices: what counts is what clients hold open.
            fc.log_readers = {h for h in fc.log_readers if not h._client_gone()} | {self}
            fc.max_log_streams = max(fc.max_log_streams, len(fc.log_readers))
        try:
            while True:
                lines, done = fc.pod_log(ns, name, sent, None)
                sent += len(lines)
                lines = [x for x in lines if since is None or x[0] >= since]
                if lines:
                    data = render(lines)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                if done or self._client_gone():
                    break
                with fc.cond:
                    fc.cond.wait(timeout=0.5)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, NotFound):
            pass
        finally:
            with fc.cond:
                fc.log_readers.discard(self)
        self.close_connection = True

    def _client_gone(self) -> bool:
        """The client closed its end (a stream it stopped reading): EOF is readable."""
        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            return bool(ready) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # -- list and watch --

    def _list(self, kind: str, ns: str | None, q: dict[str, str]) -> None:
        items, rv = self.server.cluster.list(kind, ns)
        sel = parse_selector(q.get("labelSelector"))
        fields = parse_selector(q.get("fieldSelector"))
        items = [
            o
            for o in items
            if matches(o["metadata"].get("labels") or {}, sel) and field_matches(o, fields)
        ]
        list_kind, api = _LIST_KIND[kind]
        self._send(
            200,
            {
                "kind": list_kind,
                "apiVersion": api,
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            },
        )

    def _watch(self, kind: str, ns: str | None, q: dict[str, str]) -> None:
        fc = self.server.cluster
        sel = parse_selector(q.get("labelSelector"))
        fields = parse_selector(q.get("fieldSelector"))
        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 1800)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        # The stream's connection is closed at its end, so say so: without this header the
        # client pooled it after the last chunk and, when the close came late (a loaded run 34),
        # sent its next request on it and got "Remote end closed connection without response".
        self.send_header("Connection", "close")
        self.end_headers()

        def emit(event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def wanted(obj: dict[str, Any]) -> bool:
            md = obj["metadata"]
            in_ns = ns is None or kind == "Node" or md.get("namespace") == ns
            labelled = matches(md.get("labels") or {}, sel)
            return obj["kind"] == kind and in_ns and labelled and field_matches(obj, fields)

        rv_raw = q.get("resourceVersion") or "0"
        try:
            with fc.cond:
                epoch = fc.watch_epoch
                if rv_raw == "0":  # no version: the current state as ADDED, then changes
                    items, last = fc.list(kind, ns)
                    for o in items:
                        if wanted(o):
                            emit({"type": "ADDED", "object": o})
                else:
                    last = int(rv_raw)
            while time.monotonic() < deadline:
                with fc.cond:
                    changes = fc.changes_since(last)
                    if changes is None:
                        emit(
                            {
                                "type": "ERROR",
                                "object": status(
                                    410,
                                    "Expired",
                                    f"too old resource version: {last} ({fc.oldest_rv - 1})",
                                ),
                            }
                        )
                        break
                    if not changes:
                        if fc.watch_epoch != epoch:
                            break
                        fc.cond.wait(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
                        continue
                    if fc.watch_epoch != epoch:
                        break
                for c in changes:
                    last = c.rv
                    if wanted(c.obj):
                        emit({"type": c.type, "object": c.obj})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, cluster: FakeCluster, token: str | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cluster = cluster
        self.token = token


class FakeApiServer:
    """Start with `start()` (or as a context manager); `cluster` holds the state and test hooks
    (add_node, remove_node, compact, break_watches)."""

    def __init__(self, token: str | None = "fake-k8s-token", grace_s: float = 5.0) -> None:
        self.cluster = FakeCluster(grace_s=grace_s)
        self._server = _Server(self.cluster, token)
        self.token = token
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-k8s", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.cluster.break_watches()
        self._server.shutdown()
        self._server.server_close()
        self.cluster.close()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": user}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(cfg))
        return path
