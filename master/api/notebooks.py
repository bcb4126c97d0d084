"""Notebooks and shells (Determined's shapes): started, listed, read and killed under
`/notebooks` and `/shells`; their logs are a task's (`/tasks/<id>/logs`) and their pages and
terminals are under the proxy (`/proxy/<id>/`)."""

from __future__ import annotations

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from master.api._util import int_arg, task_body
from master.auth import require_user
from master.errors import BadRequest
from master.services.task import commands as cmd_svc
from master.services.task import notebooks as nb_svc
from master.services.task import shells as shell_svc
from master.services.task import tasks as svc
from master.states import TaskType

bp = Blueprint("notebooks", __name__)


@bp.post("/notebooks")
def create_notebook() -> ResponseReturnValue:
    p = require_user()
    assert p.user_id is not None
    task, warnings = nb_svc.create_notebook(p.user_id, *task_body())
    return jsonify({"notebook": svc.tasks_json([task])[0], "warnings": warnings}), 201


@bp.get("/notebooks")
def list_notebooks() -> ResponseReturnValue:
    require_user()
    tasks = svc.list_tasks(TaskType.NOTEBOOK, limit=int_arg("limit", 1000, 1, 10_000))
    return jsonify({"notebooks": svc.tasks_json(tasks)})


@bp.get("/notebooks/<task_id>")
def get_notebook(task_id: str) -> ResponseReturnValue:
    require_user()
    task = svc.get_task(task_id)
    if task.type != TaskType.NOTEBOOK:
        raise BadRequest(f"task {task_id} is a {task.type.lower()}, not a notebook")
    return jsonify({"notebook": svc.tasks_json([task])[0]})


@bp.post("/notebooks/<task_id>/kill")
def kill_notebook(task_id: str) -> ResponseReturnValue:
    p = require_user()
    assert p.user_id is not None
    task = cmd_svc.kill_command(task_id, p.user_id, p.admin, TaskType.NOTEBOOK)
    return jsonify({"notebook": svc.tasks_json([task])[0]})


@bp.post("/shells")
def create_shell() -> ResponseReturnValue:
    p = require_user()
    assert p.user_id is not None
    task, warnings = shell_svc.create_shell(p.user_id, *task_body())
    return jsonify({"shell": svc.tasks_json([task])[0], "warnings": warnings}), 201


@bp.get("/shells")
def list_shells() -> ResponseReturnValue:
    require_user()
    tasks = svc.list_tasks(TaskType.SHELL, limit=int_arg("limit", 1000, 1, 10_000))
    return jsonify({"shells": svc.tasks_json(tasks)})


@bp.get("/shells/<task_id>")
def get_shell(task_id: str) -> ResponseReturnValue:
    require_user()
    task = svc.get_task(task_id)
    if task.type != TaskType.SHELL:
        raise BadRequest(f"task {task_id} is a {task.type.lower()}, not a shell")
    return jsonify({"shell": svc.tasks_json([task])[0]})


@bp.post("/shells/<task_id>/kill")
def kill_shell(task_id: str) -> ResponseReturnValue:
    p = require_user()
    assert p.user_id is not None
    task = cmd_svc.kill_command(task_id, p.user_id, p.admin, TaskType.SHELL)
    return jsonify({"shell": svc.tasks_json([task])[0]})
