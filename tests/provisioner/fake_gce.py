"""A small fake of the Compute Engine REST API: instances insert/list (label filters)/get/delete
and zone operations, on 127.0.0.1. google-cloud-compute's REST client talks to it through
`client_options={"api_endpoint": fake.url}` and anonymous credentials."""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PATH = re.compile(
    r"^/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/"
    r"(?P<kind>instances|operations)(?:/(?P<name>[^/]+))?(?:/(?P<verb>wait))?$"
)
LABEL = re.compile(r'labels\.([\w-]+)\s*=\s*"([^"]*)"')


class FakeComputeEngine:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.instances: dict[str, dict[str, Any]] = {}  # name -> instance resource
        self.inserted: list[dict[str, Any]] = []  # every insert body, in order
        self.deleted: list[str] = []
        self.operations: dict[str, dict[str, Any]] = {}
        self.fail_inserts: str | None = None  # e.g. "QUOTA_EXCEEDED": inserts answer 403
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self) -> tuple[re.Match[str] | None, dict[str, list[str]]]:
                parts = urlsplit(self.path)
                return PATH.match(parts.path), parse_qs(parts.query)

            def do_GET(self) -> None:  # noqa: N802
                m, q = self._route()
                if m is None:
                    return self._reply(404, _error(404, "no such path"))
                if m["kind"] == "operations":
                    return self._operation(m["name"])
                if m["name"]:
                    inst = fake.instances.get(m["name"])
                    if inst is None:
                        return self._reply(404, _error(404, f"instance {m['name']} not found"))
                    return self._reply(200, inst)
                wanted = dict(LABEL.findall((q.get("filter") or [""])[0]))
                with fake.lock:
                    fake._advance()
                    items = [
                        i
                        for i in fake.instances.values()
                        if all(i.get("labels", {}).get(k) == v for k, v in wanted.items())
                    ]
                return self._reply(200, {"kind": "compute#instanceList", "items": items})

            def do_POST(self) -> None:  # noqa: N802
                m, _ = self._route()
                if m is None:
                    return self._reply(404, _error(404, "no such path"))
                if m["kind"] == "operations":
                    return self._operation(m["name"])
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if fake.fail_inserts:
                    return self._reply(
                        403,
                        _error(403, f"{fake.fail_inserts}: Quota 'GPUS_ALL_REGIONS' exceeded."),
                    )
                name = body.get("name", "")
                with fake.lock:
                    if name in fake.instances:
                        return self._reply(409, _error(409, f"instance {name} already exists"))
                    inst = {
                        **body,
                        "id": str(uuid.uuid4().int % 10**18),
                        "status": "PROVISIONING",
                        "zone": f"projects/{m['project']}/zones/{m['zone']}",
                        "selfLink": f"{self.path}/{name}",
                    }
                    fake.instances[name] = inst
                    fake.inserted.append(body)
                    op = fake._op(m["project"], m["zone"], "insert", name)
                return self._reply(200, op)

            def do_DELETE(self) -> None:  # noqa: N802
                m, _ = self._route()
                if m is None or m["kind"] != "instances" or not m["name"]:
                    return self._reply(404, _error(404, "no such path"))
                with fake.lock:
                    if fake.instances.pop(m["name"], None) is None:
                        return self._reply(404, _error(404, f"instance {m['name']} not found"))
                    fake.deleted.append(m["name"])
                    op = fake._op(m["project"], m["zone"], "delete", m["name"])
                return self._reply(200, op)

            def _operation(self, name: str | None) -> None:
                op = fake.operations.get(name or "")
                if op is None:
                    return self._reply(404, _error(404, f"operation {name} not found"))
                return self._reply(200, op)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def _op(self, project: str, zone: str, kind: str, target: str) -> dict[str, Any]:
        name = f"operation-{uuid.uuid4().hex[:12]}"
        op = {
            "kind": "compute#operation",
            "id": str(uuid.uuid4().int % 10**18),
            "name": name,
            "operationType": kind,
            "status": "DONE",
            "progress": 100,
            "zone": f"projects/{project}/zones/{zone}",
            "targetLink": f"projects/{project}/zones/{zone}/instances/{target}",
        }
        self.operations[name] = op
        return op

    def _advance(self) -> None:
        """Instances are RUNNING once they have been listed after their insert."""
        for inst in self.instances.values():
            if inst["status"] == "PROVISIONING":
                inst["status"] = "STAGING"
            elif inst["status"] == "STAGING":
                inst["status"] = "RUNNING"

    def preempt(self, name: str) -> None:
        """What GCE does to a preempted VM: stops it; it stays listed as TERMINATED."""
        with self.lock:
            self.instances[name]["status"] = "TERMINATED"

    def add_labelled(self, name: str, labels: dict[str, str]) -> None:
        """An instance created behind the master's back (another tool, a lost record)."""
        with self.lock:
            self.instances[name] = {
                "name": name,
                "labels": labels,
                "status": "RUNNING",
                "machineType": "zones/us-central1-a/machineTypes/n1-standard-8",
                "scheduling": {"preemptible": False},
            }

    def start(self) -> FakeComputeEngine:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "errors": [{"message": message}]}}
