"""Commands: a task that runs one program on the cluster (Determined's `det cmd run`).

A command has no harness: it cannot checkpoint, so a preemptible command that is preempted is
killed and queued again from the start; a command that is not preemptible (the default, as in
Determined) is never chosen as a victim. It ends with its process: exit 0 COMPLETED, killed by its
owner CANCELED, anything else ERROR; its exit code stays on the task.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from flask import current_app

from detlab.expconf import ConfigError
from detlab.expconf._check import get_bool, get_json
from detlab.expconf._sections import parse_bind_mounts, parse_image
from detlab.protocol import StartSpec
from master.auth import new_token
from master.context import state_lock
from master.db import db
from master.errors import BadRequest, Forbidden
from master.models import Allocation, Task, User
from master.notify import hub, task_key, task_logs_key
from master.rm.registry import resource_manager
from master.services.agent.agent_users import task_user
from master.services.queue.kicker import request_schedule
from master.services.task.task_context import Upload, add_with_context, check_context
from master.services.task.tasks import get_task, live_allocation_of
from master.services.transitions import born, set_task_state
from master.services.trial.logs import write_task_line
from master.states import TERMINAL_TASK, TaskState, TaskType

MAX_SLOTS = 1024
MAX_ARGV = 64 * 1024  # characters in all
_RESOURCE_KEYS = {"slots", "priority", "resource_pool", "preemptible"}


def _entrypoint(raw: Any) -> list[str]:
    """An argv (run without a shell), or one command line (run by `sh -c`), as Determined."""
    if isinstance(raw, str):
        raw = ["sh", "-c", raw]
    if (
        not isinstance(raw, list)
        or not raw
        or not all(isinstance(a, str) and a and "\x00" not in a for a in raw)
    ):
        raise BadRequest(
            "entrypoint must be a command line or a non-empty list of non-empty strings "
            "without NUL characters",
            path="config.entrypoint",
        )
    if sum(len(a) for a in raw) > MAX_ARGV:
        raise BadRequest(
            f"entrypoint is longer than {MAX_ARGV} characters", path="config.entrypoint"
        )
    return list(raw)


def _int_in(raw: Any, default: int, lo: int, hi: int, path: str) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or not lo <= raw <= hi:
        raise BadRequest(f"{path} must be an integer from {lo} to {hi}, got {raw!r}", path=path)
    return raw


def _resources(raw: Any) -> dict[str, Any]:
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise BadRequest("resources must be an object", path="config.resources")
    unknown = sorted(set(raw) - _RESOURCE_KEYS)
    if unknown:
        raise BadRequest(f"unknown key {unknown[0]!r}", path=f"config.resources.{unknown[0]}")
    pool = raw.get("resource_pool") or "default"
    pools = current_app.config["DET"].pool_names()
    if not isinstance(pool, str) or pool not in pools:
        raise BadRequest(
            f"unknown resource pool {pool!r}; this master has {', '.join(pools)}",
            path="config.resources.resource_pool",
        )
    preemptible = raw.get("preemptible", False)
    if not isinstance(preemptible, bool):
        raise BadRequest("preemptible must be true or false", path="config.resources.preemptible")
    return {
        "slots": _int_in(raw.get("slots"), 1, 0, MAX_SLOTS, "config.resources.slots"),
        "priority": _int_in(raw.get("priority"), 42, 1, 99, "config.resources.priority"),
        "resource_pool": pool,
        "preemptible": preemptible,
    }


_ENVIRONMENT_KEYS = {"environment_variables", "image", "force_pull_image", "registry_auth"}


def _environment(raw: Any) -> dict[str, Any]:
    """`environment_variables` (a list of "NAME=value", or {cpu: [...], cuda: [...]}) and the
    container's image keys, checked as an experiment's are (detlab/expconf)."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict) or set(raw) - _ENVIRONMENT_KEYS:
        raise BadRequest(
            "environment may hold " + ", ".join(sorted(_ENVIRONMENT_KEYS)) + " only",
            path="config.environment",
        )
    env = raw.get("environment_variables", [])
    lists = env.values() if isinstance(env, dict) else [env]
    for items in lists:
        if not isinstance(items, list) or not all(
            isinstance(v, str) and "=" in v and "\x00" not in v for v in items
        ):
            raise BadRequest(
                'environment_variables must be a list of "NAME=value" strings',
                path="config.environment.environment_variables",
            )
    out: dict[str, Any] = {"environment_variables": env} if env else {}
    try:
        if raw.get("image") is not None:
            out["image"] = parse_image(raw["image"])  # a mapping stays whole: the agent picks
        if get_bool(raw, "force_pull_image", "environment", False):
            out["force_pull_image"] = True
        auth = get_json(raw, "registry_auth", "environment", None, kind=dict)
        if auth:
            out["registry_auth"] = auth
    except ConfigError as e:
        raise BadRequest(str(e), path=f"config.{e.path}") from None
    return out


def parse_task_bind_mounts(raw: Any) -> list[dict[str, Any]]:
    """A task's `bind_mounts`, as a trial's (its container gets them on a Docker agent)."""
    try:
        return parse_bind_mounts(raw)
    except ConfigError as e:
        raise BadRequest(str(e), path=f"config.{e.path}") from None


def parse_resources_environment(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A task config's `resources` and `environment` (commands, notebooks, shells)."""
    resources = _resources(config.get("resources"))
    return resources, _environment(config.get("environment"))


def parse_command_config(body: dict[str, Any]) -> dict[str, Any]:
    """Determined's `POST /api/v1/commands` body: {"config": {entrypoint, resources, ...}}."""
    config = body.get("config")
    if not isinstance(config, dict):
        raise BadRequest("config must be an object with an entrypoint", path="config")
    from master.services.task.task_config import split, task_slurm

    config, warnings = split(config, TaskType.COMMAND)
    description = config.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > 256):
        raise BadRequest(
            "description must be text of at most 256 characters", path="config.description"
        )
    resources, environment = parse_resources_environment(config)
    slurm, more = task_slurm(config, resources["resource_pool"])
    return {
        "entrypoint": _entrypoint(config.get("entrypoint")),
        "resources": resources,
        "environment": environment,
        "bind_mounts": parse_task_bind_mounts(config.get("bind_mounts")),
        "description": description,
        "slurm": slurm,
        "warnings": warnings + more,
    }


def create_command(
    owner_id: int, body: dict[str, Any], context: Upload | None = None
) -> tuple[Task, list[str]]:
    """The new command (with its `--context` archive, if any), and warnings naming the config
    keys it accepted without acting on."""
    config = parse_command_config(body)
    res = config["resources"]
    task = Task(
        id=str(uuid.uuid4()),
        type=TaskType.COMMAND,
        state=TaskState.ACTIVE,
        owner_id=owner_id,
        name=config["description"] or f"Command ({' '.join(config['entrypoint'])[:200]})",
        resource_pool=res["resource_pool"],
        slots=res["slots"],
        priority=res["priority"],
        preemptible=res["preemptible"],
        spec={
            "entrypoint": config["entrypoint"],
            "environment": config["environment"],
            "bind_mounts": config["bind_mounts"],
            "slurm": config["slurm"],
        },
    )
    check_context(context)
    with state_lock():  # before the first write (master/lock_order.py)
        add_with_context(task, context)
        born("task", task.id, TaskState.ACTIVE, "command submitted")
        db.session.commit()
    request_schedule()
    return task, config["warnings"]


def kill_command(
    task_id: str,
    user_id: int,
    admin: bool,
    kind: TaskType = TaskType.COMMAND,
    why: str = "killed by the user",
) -> Task:
    """Kill a command (or a notebook, `kind`): a queued one ends CANCELED now; a running one
    once its process is gone."""
    noun = kind.value.lower()
    with state_lock():
        task = get_task(task_id)
        if task.type != kind:
            raise BadRequest(f"task {task_id} is a {task.type.lower()}, not a {noun}")
        if not admin and task.owner_id != user_id:
            raise Forbidden(f"only its owner or an admin may kill {noun} {task_id}")
        if task.state in TERMINAL_TASK:
            return task
        alloc = live_allocation_of(task.id)
        if alloc is None:
            set_task_state(task, TaskState.CANCELED, f"{why} before it started")
        else:
            set_task_state(task, TaskState.STOPPING, why)
            resource_manager(task.resource_pool or "default").kill(alloc)
            write_task_line(task.id, alloc, why)
        db.session.commit()
    hub().notify(task_key(task.id), task_logs_key(task.id))
    return task


def command_exited(alloc: Allocation) -> None:
    """What a command's ended allocation means (its resources are freed already)."""
    task = alloc.task
    code, why = alloc.exit_code, alloc.exit_reason
    task.exit_code = code
    task.exit_reason = why
    if task.state == TaskState.STOPPING or alloc.kill_requested:
        set_task_state(task, TaskState.CANCELED, "killed")
    elif alloc.preempt_requested and task.state == TaskState.ACTIVE:
        write_task_line(task.id, alloc, "preempted to make room for other work; it queues again")
    elif code == 0 and not why:
        set_task_state(task, TaskState.COMPLETED, "its process exited with code 0")
    else:
        reason = f"exit code {code}" + (f": {why}" if why else "")
        set_task_state(task, TaskState.ERROR, f"its process failed ({reason})")
    hub().notify(task_key(task.id), task_logs_key(task.id))


def with_context(entrypoint: list[str]) -> list[str]:
    """The entrypoint run by harness/task_context.py, which unpacks the task's context into its
    working directory and then execs it (the same process: signals and exit code are its own).
    In the harness, not the agent: the process, Docker, Slurm and Kubernetes runtimes all run
    it the same way (`python3` is the agent's interpreter or the image's, as for a notebook)."""
    return ["python3", "-m", "harness.task_context", "--", *entrypoint]


def command_start_spec(alloc: Allocation, agent_id: str, rank: int, slots: list[int]) -> StartSpec:
    """What an agent starts for a command (a notebook, a shell): its argv and environment, no
    model definition. A task with a `--context` gets a session token of its allocation and runs
    through the launcher that fetches and unpacks it (`with_context`); others get no token."""
    task = alloc.task
    spec = task.spec or {}
    owner = db.session.get(User, task.owner_id) if task.owner_id is not None else None
    entrypoint = list(spec.get("entrypoint") or [])
    env = {
        "DET_TASK_ID": task.id,
        "DET_TASK_TYPE": task.type.value,
        "DET_ALLOCATION_ID": alloc.id,
        "DET_SLOT_IDS": json.dumps(slots),
        "DET_CONTAINER_RANK": str(rank),
        # A notebook's own token (JUPYTER_TOKEN): what the proxy adds to each request.
        **{str(k): str(v) for k, v in (spec.get("service_env") or {}).items()},
    }
    if task.context_sha256 is not None:
        entrypoint = with_context(entrypoint)
        env["DET_SESSION_TOKEN"] = new_token(allocation_id=alloc.id)  # the caller commits
        env["DET_TASK_CONTEXT_SHA256"] = task.context_sha256
    return StartSpec(
        allocation_id=alloc.id,
        trial_id=0,
        experiment_id=0,
        entrypoint=entrypoint,
        slot_indexes=tuple(slots),
        env=env,
        environment=dict(spec.get("environment") or {}),
        # A TensorBoard's read-only view of its sources' shared_fs storage (tensorboards.py).
        bind_mounts=list(spec.get("bind_mounts") or []),
        # Whose code this is: the agent runs it as that user's Unix identity (docs/security.md).
        # A command whose owner was deleted carries none, and agents refuse it.
        user=task_user(owner, current_app.config["DET"].agent_user_group) if owner else None,
        proxy=bool(spec.get("proxy")),
    )
