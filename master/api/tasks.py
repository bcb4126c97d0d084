"""Tasks and commands (Determined's shapes): `GET /tasks` lists every task type; commands are
created, read, killed and their logs followed under `/commands` and `/tasks/<id>/logs`; a task's
`--context` is read by the task itself at `/tasks/<id>/context`."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from flask.typing import ResponseReturnValue

from master.api._util import bool_arg, float_arg, int_arg, str_arg, task_body
from master.auth import principal, require_user
from master.errors import BadRequest
from master.services.task import commands as cmd_svc
from master.services.task import task_context
from master.services.task import tasks as svc
from master.services.task.task_logs import task_logs_page
from master.services.trial import logs as log_svc
from master.states import TaskType

bp = Blueprint("tasks", __name__)


def _type_arg() -> TaskType | None:
    raw = str_arg("type")
    if raw is None or raw == "":
        return None
    try:
        return TaskType(raw.upper())
    except ValueError:
        names = ", ".join(t.value for t in TaskType)
        raise BadRequest(f"unknown task type {raw!r}; one of {names}", path="type") from None


@bp.get("/tasks")
def list_tasks() -> ResponseReturnValue:
    require_user()
    tasks = svc.tasks_json(
        svc.list_tasks(
            _type_arg(),
            active_only=bool_arg("active"),
            limit=int_arg("limit", 1000, 1, 10_000),
        )
    )
    return jsonify({"tasks": tasks, "allocationIdToSummary": svc.allocation_summaries(tasks)})


@bp.get("/tasks/<task_id>")
def get_task(task_id: str) -> ResponseReturnValue:
    require_user()
    return jsonify({"task": svc.tasks_json([svc.get_task(task_id)])[0]})


@bp.get("/tasks/<task_id>/logs")
def task_logs(task_id: str) -> ResponseReturnValue:
    require_user()
    task = svc.get_task(task_id)
    args = (
        int_arg("after", 0),
        int_arg("limit", 1000, 1, 10000),
        bool_arg("follow"),
        float_arg("timeout", 30.0, 0.0, 60.0),
    )
    if task.trial_id is not None:  # a trial's log is its trial's (shared tail)
        return jsonify(log_svc.logs_page(task.trial_id, *args))
    return jsonify(task_logs_page(task.id, *args))


@bp.get("/tasks/<task_id>/context")
def task_context_archive(task_id: str) -> ResponseReturnValue:
    """A command's, notebook's or shell's `--context` (.tar.gz), for the task's own session
    token only (harness/task_context.py fetches it before its program starts)."""
    task, data = task_context.context_of(principal(), task_id)
    headers = {"X-Content-SHA256": task.context_sha256 or ""}
    if task.context_size is not None:
        headers["Content-Length"] = str(task.context_size)
    return Response(data, mimetype="application/gzip", headers=headers)


@bp.post("/commands")
def create_command() -> ResponseReturnValue:
    p = require_user()
    assert p.user_id is not None
    task, warnings = cmd_svc.create_command(p.user_id, *task_body())
    return jsonify({"command": svc.tasks_json([task])[0], "warnings": warnings}), 201


@bp.get("/commands")
def list_commands() -> ResponseReturnValue:
    require_user()
    tasks = svc.list_tasks(TaskType.COMMAND, limit=int_arg("limit", 1000, 1, 10_000))
    return jsonify({"commands": svc.tasks_json(tasks)})


@bp.get("/commands/<task_id>")
def get_command(task_id: str) -> ResponseReturnValue:
    require_user()
    task = svc.get_task(task_id)
    if task.type != TaskType.COMMAND:
        raise BadRequest(f"task {task_id} is a {task.type.lower()}, not a command")
    return jsonify({"command": svc.tasks_json([task])[0]})


@bp.post("/commands/<task_id>/kill")
def kill_command(task_id: str) -> ResponseReturnValue:
    p = require_user()
    assert p.user_id is not None
    task = cmd_svc.kill_command(task_id, p.user_id, p.admin)
    return jsonify({"command": svc.tasks_json([task])[0]})
