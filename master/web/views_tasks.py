"""The tasks page: every task the cluster runs (trials, commands, ...) with its type, owner,
state and age; a task's own page with its log; killing a command (its owner or an admin)."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from master.errors import BadRequest, Forbidden
from master.services.task import commands as cmd_svc
from master.services.task import tasks as task_svc
from master.services.task.task_logs import task_logs_page
from master.states import TERMINAL_TASK, TaskState, TaskType
from master.web.blueprint import bp, safe_next
from master.web.session import current_user

PAGE = 200  # tasks on the page, newest first
LOG_LINES = 1000  # the first lines of a task's log on its page


def _type_filter() -> TaskType | None:
    raw = (request.args.get("type") or "").strip().upper()
    if not raw:
        return None
    try:
        return TaskType(raw)
    except ValueError:
        names = ", ".join(t.value for t in TaskType)
        raise BadRequest(f"unknown task type {raw!r}; one of {names}", path="type") from None


@bp.get("/tasks")
def tasks() -> ResponseReturnValue:
    kind = _type_filter()
    active = request.args.get("active") == "1"
    rows = task_svc.tasks_json(task_svc.list_tasks(kind, active_only=active, limit=PAGE))
    return render_template(
        "tasks.html",
        tasks=rows,
        kind=kind.value if kind else "",
        active=active,
        types=[t.value for t in TaskType],
        terminal={s.value for s in TERMINAL_TASK},
    )


@bp.get("/tasks/<task_id>")
def task(task_id: str) -> ResponseReturnValue:
    t = task_svc.get_task(task_id)
    if t.trial_id is not None:  # a trial's log is on its trial's page (its shared tail)
        return redirect(url_for("web.trial", trial_id=t.trial_id) + "#logs")
    row = task_svc.tasks_json([t])[0]
    page = task_logs_page(t.id, 0, LOG_LINES, False, 0.0)
    return render_template(
        "task.html",
        t=row,
        logs=page["logs"],
        more=len(page["logs"]) == LOG_LINES,
        live=t.state not in TERMINAL_TASK,
        killable=t.type == TaskType.COMMAND and t.state not in TERMINAL_TASK,
    )


@bp.post("/tasks/<task_id>/kill")
def kill_task(task_id: str) -> ResponseReturnValue:
    """Kill a command (the form asks for confirmation first); other task types have their own
    controls (a trial's experiment is killed on its page)."""
    me = current_user()
    if me is None or me.user_id is None:
        raise Forbidden("sign in as a user to kill a task")
    t = task_svc.get_task(task_id)
    if t.type != TaskType.COMMAND:
        raise BadRequest(
            f"task {task_id} is a {t.type.lower()}; kill it from its experiment's page"
        )
    done = cmd_svc.kill_command(task_id, me.user_id, me.admin)
    flash(
        f"Command {task_id} "
        + ("is stopping." if done.state == TaskState.STOPPING else f"is {done.state.value}.")
    )
    return redirect(safe_next(request.form.get("next") or url_for("web.tasks")))
