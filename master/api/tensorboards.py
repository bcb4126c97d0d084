"""TensorBoards (Determined's shapes): started, listed, read and killed under `/tensorboards`;
their logs are a task's (`/tasks/<id>/logs`) and their pages are under the proxy."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from master.api._util import int_arg, json_body
from master.auth import require_user
from master.errors import BadRequest
from master.models import Task
from master.services.task import commands as cmd_svc
from master.services.task import tasks as svc
from master.services.task import tensorboards as tb_svc
from master.states import TaskType

bp = Blueprint("tensorboards", __name__)


def _json(tasks: list[Task]) -> list[dict[str, Any]]:
    """A task's JSON plus the experiments and trials it shows (never its token)."""
    out = []
    for task, body in zip(tasks, svc.tasks_json(tasks), strict=True):
        spec = task.spec or {}
        body["experiment_ids"] = list(spec.get("experiment_ids") or [])
        body["trial_ids"] = list(spec.get("trial_ids") or [])
        out.append(body)
    return out


def _tensorboard(task_id: str) -> Task:
    task = svc.get_task(task_id)
    if task.type != TaskType.TENSORBOARD:
        raise BadRequest(f"task {task_id} is a {task.type.lower()}, not a TensorBoard")
    return task


@bp.post("/tensorboards")
def create_tensorboard() -> ResponseReturnValue:
    p = require_user()
    assert p.user_id is not None
    task, warnings = tb_svc.create_tensorboard(p.user_id, json_body(), p.admin)
    return jsonify({"tensorboard": _json([task])[0], "warnings": warnings}), 201


@bp.get("/tensorboards")
def list_tensorboards() -> ResponseReturnValue:
    require_user()
    tasks = svc.list_tasks(TaskType.TENSORBOARD, limit=int_arg("limit", 1000, 1, 10_000))
    return jsonify({"tensorboards": _json(tasks)})


@bp.get("/tensorboards/<task_id>")
def get_tensorboard(task_id: str) -> ResponseReturnValue:
    require_user()
    return jsonify({"tensorboard": _json([_tensorboard(task_id)])[0]})


@bp.post("/tensorboards/<task_id>/kill")
def kill_tensorboard(task_id: str) -> ResponseReturnValue:
    p = require_user()
    assert p.user_id is not None
    task = cmd_svc.kill_command(task_id, p.user_id, p.admin, TaskType.TENSORBOARD)
    return jsonify({"tensorboard": _json([task])[0]})
