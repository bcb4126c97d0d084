"""The fake cluster's tasks (`GET /tasks`, a command's log, killing a task): fixed data for
det-tui's tasks view in tests, snapshots and `det-tui --demo`. Mixed into `FakeClient`."""

from __future__ import annotations

import copy
from typing import Any

from harness.api import Conflict, DetError, Forbidden, NotFound

JSON = dict[str, Any]
TERMINAL = ("COMPLETED", "CANCELED", "ERROR")


def make_tasks(iso: Any) -> list[JSON]:
    """Newest first, as the master lists them: commands of two users, trials' tasks, a notebook
    idle for 25 minutes and a shell in use."""
    specs = [
        (
            "5f0c2a1e-9b7d-4c1a-8e2f-0a1b2c3d4e5f",
            "COMMAND",
            "ACTIVE",
            "alice",
            "nvidia-smi -l 5",
            None,
            "default",
            1,
            120,
            None,
        ),
        (
            "c41d7e22-3a9b-4f60-9d18-7e6f5a4b3c2d",
            "COMMAND",
            "ACTIVE",
            "bob",
            "prep shards",
            None,
            "default",
            4,
            300,
            "waiting for 4 free slot(s)",
        ),
        (
            "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d",
            "COMMAND",
            "COMPLETED",
            "alice",
            "du -sh /data",
            None,
            "cpu",
            0,
            1800,
            None,
        ),
        (
            "1.r101",
            "TRIAL",
            "ACTIVE",
            "alice",
            "Trial 101 (Experiment 1)",
            101,
            "default",
            1,
            3600,
            None,
        ),
        (
            "2.r201",
            "TRIAL",
            "ACTIVE",
            "bob",
            "Trial 201 (Experiment 2)",
            201,
            "default",
            1,
            7200,
            None,
        ),
        (
            "7e1f0b2c-6d5a-4e3f-8a9b-0c1d2e3f4a5b",
            "NOTEBOOK",
            "ACTIVE",
            "alice",
            "JupyterLab (7e1f0b2c)",
            None,
            "default",
            1,
            9000,
            None,
        ),
        (
            "3c2b1a09-8f7e-4d6c-9b5a-4f3e2d1c0b9a",
            "SHELL",
            "ACTIVE",
            "bob",
            "Shell (3c2b1a09)",
            None,
            "default",
            0,
            10800,
            None,
        ),
    ]
    idle = {"NOTEBOOK": iso(1500)}  # idle since 25 minutes ago; the shell is in use
    tasks = []
    for tid, kind, state, owner, name, trial, pool, slots, age, waiting in specs:
        running = state == "ACTIVE" and waiting is None
        tasks.append(
            {
                "id": tid,
                "type": kind,
                "state": state,
                "name": name,
                "owner": owner,
                "trial_id": trial,
                "slots": slots,
                "priority": 42,
                "resource_pool": pool,
                "preemptible": kind == "TRIAL",
                "experiment_id": int(tid.split(".")[0]) if trial else None,
                "exit_code": 0 if state == "COMPLETED" else None,
                "exit_reason": None,
                "created_at": iso(age),
                "ended_at": iso(60) if state in TERMINAL else None,
                "allocation": {"id": f"alloc-{tid[:8]}", "state": "RUNNING", "agents": []}
                if running
                else None,
                "waiting_for": waiting,
                "idle_since": idle.get(kind),
            }
        )
    return tasks


class FakeTasks:
    """The task routes of the fake client (its `user`, `calls` and `iso` come from FakeClient)."""

    tasks: list[JSON]
    user: JSON
    calls: list[tuple[str, tuple, dict]]

    def list_tasks(self, task_type: str | None = None, active: bool = False) -> list[JSON]:
        self.calls.append(("list_tasks", (task_type,), {"active": active}))
        return copy.deepcopy(
            [
                t
                for t in self.tasks
                if task_type in (None, t["type"]) and not (active and t["state"] in TERMINAL)
            ]
        )

    def _task(self, task_id: str) -> JSON:
        for t in self.tasks:
            if t["id"] == task_id:
                return t
        raise NotFound(404, f"task {task_id!r} not found", "not_found")

    def kill_command(self, task_id: str) -> JSON:
        return self._kill("kill_command", task_id, "COMMAND")

    def kill_notebook(self, task_id: str) -> JSON:
        return self._kill("kill_notebook", task_id, "NOTEBOOK")

    def kill_shell(self, task_id: str) -> JSON:
        return self._kill("kill_shell", task_id, "SHELL")

    def kill_tensorboard(self, task_id: str) -> JSON:
        return self._kill("kill_tensorboard", task_id, "TENSORBOARD")

    def _kill(self, call: str, task_id: str, kind: str) -> JSON:
        """The master's answers to `POST /<kind>s/<id>/kill`: wrong type, not yours, ended."""
        self.calls.append((call, (task_id,), {}))
        t = self._task(task_id)
        noun = kind.lower()
        if t["type"] != kind:
            raise DetError(f"task {task_id} is a {t['type'].lower()}, not a {noun}")
        if not self.user.get("admin") and t["owner"] != self.user.get("username"):
            raise Forbidden(403, f"only its owner or an admin may kill {noun} {task_id}", "x")
        if t["state"] in TERMINAL:
            raise Conflict(409, f"{noun} {task_id} has ended", "conflict")
        t["state"], t["allocation"], t["waiting_for"] = "CANCELED", None, None
        return copy.deepcopy(t)

    def task_logs(
        self,
        task_id: str,
        after: int = 0,
        limit: int = 1000,
        follow: bool = False,
        timeout: float = 30.0,
    ) -> JSON:
        t = self._task(task_id)
        lines = [f"scheduled on agent gpu-node-00 (slots {', '.join(['0'] * t['slots'])})"]
        lines += [f"{t['name']}: line {i}" for i in range(1, 6)]
        logs = [
            {
                "seq": i + 1,
                "timestamp": t["created_at"],
                "stream": "master" if i == 0 else "stdout",
                "agent_id": "gpu-node-00",
                "allocation_id": None,
                "line": line,
            }
            for i, line in enumerate(lines)
        ]
        page = [entry for entry in logs if entry["seq"] > after][:limit]
        done = t["state"] in TERMINAL
        return {"logs": page, "last_seq": page[-1]["seq"] if page else after, "done": done}
