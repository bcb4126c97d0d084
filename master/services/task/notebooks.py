"""Notebooks: JupyterLab on a slot as its owner, reached through the master's proxy
(Determined's `det notebook`). A notebook is a command whose entrypoint the master writes: the
agent picks its port (`StartSpec.proxy`), Jupyter takes its token from the environment (never
from argv, which other users on the agent could read in `ps`), and the proxy adds that token
to every request (master/proxy). Its end is a command's end (services/task/commands.py).
"""

from __future__ import annotations

import re
import secrets
import shlex
import uuid
from typing import Any

from flask import current_app

from master.context import state_lock
from master.db import db
from master.errors import BadRequest
from master.models import Task
from master.services.queue.kicker import request_schedule
from master.services.task.commands import parse_resources_environment, parse_task_bind_mounts
from master.services.task.task_config import split, task_slurm
from master.services.task.task_context import Upload, add_with_context, check_context
from master.services.transitions import born
from master.states import TaskState, TaskType

# Determined's notebook_idle_type values (services/task/idle.py says what each one counts).
IDLE_TYPES = ("kernels_or_terminals", "kernel_connections", "activity")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
MAX_IDLE_S = 365 * 86400


def parse_duration(raw: Any, path: str) -> float | None:
    """Determined's durations: "30m", "2h", "45s", or a number of seconds; None: never."""
    if raw is None:
        return None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        seconds = float(raw)
    elif isinstance(raw, str) and (m := _DURATION.match(raw)):
        seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    else:
        raise BadRequest(
            f'{path} must be a duration such as "30m", "2h" or "45s", got {raw!r}', path=path
        )
    if not 0 < seconds <= MAX_IDLE_S:
        raise BadRequest(f"{path} must be more than 0 s and at most 365 days", path=path)
    return seconds


def parse_notebook_config(body: dict[str, Any]) -> dict[str, Any]:
    config = body.get("config", {})
    if not isinstance(config, dict):
        raise BadRequest("config must be an object", path="config")
    config, warnings = split(config, TaskType.NOTEBOOK)
    description = config.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > 256):
        raise BadRequest(
            "description must be text of at most 256 characters", path="config.description"
        )
    idle_type = config.get("notebook_idle_type", IDLE_TYPES[0])
    if idle_type not in IDLE_TYPES:
        raise BadRequest(
            f"notebook_idle_type must be one of {', '.join(IDLE_TYPES)}, got {idle_type!r}",
            path="config.notebook_idle_type",
        )
    resources, environment = parse_resources_environment(config)
    slurm, more = task_slurm(config, resources["resource_pool"])
    return {
        "description": description,
        "resources": resources,
        "environment": environment,
        "bind_mounts": parse_task_bind_mounts(config.get("bind_mounts")),
        "idle_timeout": parse_duration(config.get("idle_timeout"), "config.idle_timeout"),
        "notebook_idle_type": idle_type,
        "slurm": slurm,
        "warnings": warnings + more,
    }


def jupyter_entrypoint(task_id: str) -> list[str]:
    """JupyterLab serving under the proxy's path on the port the agent picked (DET_TASK_PORT)."""
    args = [
        "python3",  # images have python3 (Debian's has no `python`); on agents it is the venv's
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=0.0.0.0",  # the master reaches it at the agent's address
        "--ServerApp.port_retries=0",  # that port or none: the agent reported that one
        f"--ServerApp.base_url=/proxy/{task_id}/",  # the proxy forwards paths unchanged
        "--ServerApp.allow_remote_access=True",  # the Host header is the agent's address
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",  # no network
    ]
    return ["sh", "-c", f'exec {shlex.join(args)} --ServerApp.port="$DET_TASK_PORT"']


def cluster_idle_timeout(own: float | None, key: str) -> float | None:
    """A task's idle timeout: its config's own, else the cluster's default for its kind
    (master.yaml's `notebook_timeout` or `tensorboard_timeout`, Determined's keys; None: never
    reaped). Applied once, when the task is created: a master restarted with another default
    leaves running tasks as they were started."""
    if own is not None:
        return own
    default = getattr(current_app.config["DET"], key)
    return float(default) if default is not None else None


def create_notebook(
    owner_id: int, body: dict[str, Any], context: Upload | None = None
) -> tuple[Task, list[str]]:
    """The new notebook (with its `--context`, if any), and warnings naming the config keys it
    accepted without acting on."""
    config = parse_notebook_config(body)
    config["idle_timeout"] = cluster_idle_timeout(config["idle_timeout"], "notebook_timeout")
    task_id = str(uuid.uuid4())
    return create_proxied_task(
        owner_id,
        TaskType.NOTEBOOK,
        task_id,
        config,
        name=config["description"] or f"JupyterLab ({task_id[:8]})",
        entrypoint=jupyter_entrypoint(task_id),
        token_env="JUPYTER_TOKEN",
        context=context,
    ), config["warnings"]


def create_proxied_task(
    owner_id: int,
    kind: TaskType,
    task_id: str,
    config: dict[str, Any],
    *,
    name: str,
    entrypoint: list[str],
    token_env: str,
    context: Upload | None = None,
) -> Task:
    """A task served through the proxy (a notebook, a shell), queued for a slot."""
    res = config["resources"]
    token = secrets.token_urlsafe(32)
    task = Task(
        id=task_id,
        type=kind,
        state=TaskState.ACTIVE,
        owner_id=owner_id,
        name=name,
        resource_pool=res["resource_pool"],
        slots=res["slots"],
        priority=res["priority"],
        preemptible=res["preemptible"],
        spec={
            "entrypoint": entrypoint,
            "environment": config["environment"],
            "bind_mounts": config.get("bind_mounts", []),
            "proxy": True,
            # The task's own token: the proxy adds it; no API answer ever carries it.
            "service_token": token,
            "service_env": {token_env: token},
            "idle_timeout": config.get("idle_timeout"),
            "notebook_idle_type": config.get("notebook_idle_type"),
            "slurm": config.get("slurm"),
        },
    )
    check_context(context)
    with state_lock():  # before the first write (master/lock_order.py)
        add_with_context(task, context)
        born("task", task.id, TaskState.ACTIVE, f"{kind.value.lower()} started")
        db.session.commit()
    request_schedule()
    return task
