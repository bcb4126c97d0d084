"""The Client's calls for tasks and commands (Determined's `det task` and `det cmd`), and the log
paging that trials' and tasks' logs share."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from harness.api._errors import DetError, MasterUnreachable
from harness.api._session import Session

JSON = dict[str, Any]


class TaskCalls:
    session: Session

    def list_tasks(self, task_type: str | None = None, active: bool = False) -> list[JSON]:
        """Every task (trials, commands, ...), newest first."""
        params: dict[str, Any] = {}
        if task_type:
            params["type"] = task_type
        if active:
            params["active"] = "true"
        return self.session.get("/tasks", params=params or None)["tasks"]

    def get_task(self, task_id: str) -> JSON:
        return self.session.get(f"/tasks/{task_id}")["task"]

    def _start(self, path: str, config: JSON, context: bytes | None) -> JSON:
        """POST a task's config; with a `context` (.tar.gz bytes) as multipart, its config as
        JSON text beside the archive (master/api/_util.task_body)."""
        if context is None:
            return self.session.post(path, {"config": config})
        files = {
            "config": (None, json.dumps(config), "application/json"),
            "context": ("context.tar.gz", context, "application/gzip"),
        }
        timeout = max(self.session.timeout, 120.0)
        return self.session.request("POST", path, files=files, timeout=timeout).json()

    def run_command(self, config: JSON, context: bytes | None = None) -> JSON:
        """Queue a command: `config` is Determined's (entrypoint, resources, environment);
        `context`: a directory's .tar.gz, unpacked in its working directory."""
        return self._start("/commands", config, context)["command"]

    def list_commands(self) -> list[JSON]:
        return self.session.get("/commands")["commands"]

    def kill_command(self, task_id: str) -> JSON:
        return self.session.post(f"/commands/{task_id}/kill")["command"]

    def start_notebook(self, config: JSON, context: bytes | None = None) -> JSON:
        """Start JupyterLab on a slot: `config` is Determined's notebook config."""
        body = self._start("/notebooks", config, context)
        return {**body["notebook"], "warnings": body.get("warnings") or []}

    def list_notebooks(self) -> list[JSON]:
        return self.session.get("/notebooks")["notebooks"]

    def get_notebook(self, task_id: str) -> JSON:
        return self.session.get(f"/notebooks/{task_id}")["notebook"]

    def kill_notebook(self, task_id: str) -> JSON:
        return self.session.post(f"/notebooks/{task_id}/kill")["notebook"]

    def start_tensorboard(
        self, experiment_ids: list[int], trial_ids: list[int], config: JSON | None = None
    ) -> JSON:
        """TensorBoard over the trials' event files (all trials of `experiment_ids`)."""
        body = {"experiment_ids": experiment_ids, "trial_ids": trial_ids, "config": config or {}}
        answer = self.session.post("/tensorboards", body)
        return {**answer["tensorboard"], "warnings": answer.get("warnings") or []}

    def list_tensorboards(self) -> list[JSON]:
        return self.session.get("/tensorboards")["tensorboards"]

    def get_tensorboard(self, task_id: str) -> JSON:
        return self.session.get(f"/tensorboards/{task_id}")["tensorboard"]

    def kill_tensorboard(self, task_id: str) -> JSON:
        return self.session.post(f"/tensorboards/{task_id}/kill")["tensorboard"]

    def start_shell(self, config: JSON, context: bytes | None = None) -> JSON:
        """Start a shell task on a slot (`det shell start`): `config` is Determined's."""
        body = self._start("/shells", config, context)
        return {**body["shell"], "warnings": body.get("warnings") or []}

    def list_shells(self) -> list[JSON]:
        return self.session.get("/shells")["shells"]

    def get_shell(self, task_id: str) -> JSON:
        return self.session.get(f"/shells/{task_id}")["shell"]

    def kill_shell(self, task_id: str) -> JSON:
        return self.session.post(f"/shells/{task_id}/kill")["shell"]

    def proxy_url(self, task_id: str, path: str = "") -> str:
        """Where the master serves a task through its proxy: the master's host at the proxy's
        port (`GET /master`'s `proxy_port`)."""
        port = self.session.get("/master").get("proxy_port")
        if not port:
            raise DetError("the master serves no proxy (an older master?)")
        parts = urlsplit(self.session.master)
        host = parts.hostname or "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        return f"{parts.scheme}://{host}:{port}/proxy/{task_id}/{path.lstrip('/')}"

    def task_logs(
        self,
        task_id: str,
        after: int = 0,
        limit: int = 1000,
        follow: bool = False,
        timeout: float = 30.0,
    ) -> JSON:
        return self._logs_page(f"/tasks/{task_id}/logs", after, limit, follow, timeout)

    def follow_task_logs(
        self, task_id: str, after: int = 0, timeout: float = 30.0, max_outage: float = 120.0
    ) -> Iterator[JSON]:
        """Every log line after `after` until the task has ended (`done`)."""
        return self._follow_logs(f"/tasks/{task_id}/logs", after, timeout, max_outage)

    def _logs_page(self, path: str, after: int, limit: int, follow: bool, timeout: float) -> JSON:
        """One page of logs: `{"logs": [Log], "last_seq": N, "done": bool}`."""
        params: dict[str, Any] = {"after": after, "limit": limit}
        if follow:
            params.update(follow="true", timeout=timeout)
        http_timeout = timeout + 15.0 if follow else None
        return self.session.get(path, params=params, timeout=http_timeout)

    def _follow_logs(
        self, path: str, after: int, timeout: float, max_outage: float
    ) -> Iterator[JSON]:
        """Long-poll `path` until the master says `done`; rides out a master restart of up to
        `max_outage` seconds."""
        down_since: float | None = None
        while True:
            try:
                page = self._logs_page(path, after, 1000, True, timeout)
            except MasterUnreachable:
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > max_outage:
                    raise
                time.sleep(1.0)
                continue
            down_since = None
            logs = page.get("logs") or []
            yield from logs
            if logs:
                after = int(logs[-1].get("seq", after))
            if page.get("done") and not logs:
                return
