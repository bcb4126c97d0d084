"""Shells: a terminal on a slot as its owner (Determined's `det shell`). The task runs
harness/shell/server.py, which gives each WebSocket through the proxy its own pseudo-terminal;
the task stays up between sessions until killed (or idle past its `idle_timeout`: no session
open and nothing through the proxy for that long)."""

from __future__ import annotations

import uuid
from typing import Any

from master.errors import BadRequest
from master.models import Task
from master.services.task.commands import parse_resources_environment, parse_task_bind_mounts
from master.services.task.notebooks import create_proxied_task, parse_duration
from master.services.task.task_config import split, task_slurm
from master.services.task.task_context import Upload
from master.states import TaskType

SHELL_ENTRYPOINT = ["python3", "-m", "harness.shell.server"]


def parse_shell_config(body: dict[str, Any]) -> dict[str, Any]:
    config = body.get("config", {})
    if not isinstance(config, dict):
        raise BadRequest("config must be an object", path="config")
    config, warnings = split(config, TaskType.SHELL)
    description = config.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > 256):
        raise BadRequest(
            "description must be text of at most 256 characters", path="config.description"
        )
    resources, environment = parse_resources_environment(config)
    slurm, more = task_slurm(config, resources["resource_pool"])
    return {
        "description": description,
        "resources": resources,
        "environment": environment,
        "bind_mounts": parse_task_bind_mounts(config.get("bind_mounts")),
        "idle_timeout": parse_duration(config.get("idle_timeout"), "config.idle_timeout"),
        "slurm": slurm,
        "warnings": warnings + more,
    }


def create_shell(
    owner_id: int, body: dict[str, Any], context: Upload | None = None
) -> tuple[Task, list[str]]:
    config = parse_shell_config(body)
    task_id = str(uuid.uuid4())
    return create_proxied_task(
        owner_id,
        TaskType.SHELL,
        task_id,
        config,
        name=config["description"] or f"Shell ({task_id[:8]})",
        entrypoint=SHELL_ENTRYPOINT,
        token_env="DET_SERVICE_TOKEN",
        context=context,
    ), config["warnings"]
