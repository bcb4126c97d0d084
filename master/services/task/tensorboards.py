"""TensorBoards: TensorBoard over some trials' event files, reached through the master's proxy
(Determined's `det tensorboard`). A TensorBoard is a command whose entrypoint the master writes
(`python -m harness.tb_serve`): it runs as its owner's Unix user on an agent, copies the trials'
files from their experiments' checkpoint storage (harness/core/_tensorboard.py's layout) and
serves them under `/proxy/<task_id>/`, answering only requests that carry its own token, which
the proxy adds (master/proxy). Its end is a command's end (services/task/commands.py).
"""

from __future__ import annotations

import json
import secrets
import uuid
from typing import Any

from sqlalchemy import select

from master.ckpt.storage import SECRET_KEYS
from master.context import state_lock
from master.db import db
from master.errors import BadRequest, Forbidden, NotFound
from master.models import Experiment, Task, Trial
from master.services.queue.kicker import request_schedule
from master.services.task.commands import parse_resources_environment
from master.services.task.notebooks import cluster_idle_timeout, parse_duration
from master.services.task.task_config import split
from master.services.transitions import born
from master.states import TaskState, TaskType

MAX_TRIALS = 1000


def _ids(raw: Any, path: str) -> list[int]:
    raw = [] if raw is None else raw
    if not isinstance(raw, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in raw
    ):
        raise BadRequest(f"{path} must be a list of positive integer ids", path=path)
    return sorted(set(raw))


def group_sources(
    trials: list[tuple[int, int]], storages: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Pure: `(experiment id, trial id)` pairs and each experiment's checkpoint storage as what
    the TensorBoard process reads (DET_TENSORBOARD_SOURCES): one entry per experiment."""
    by_exp: dict[int, list[int]] = {}
    for exp_id, trial_id in trials:
        by_exp.setdefault(exp_id, []).append(trial_id)
    return [
        {"experiment_id": e, "trial_ids": sorted(set(ts)), "storage": storages[e]}
        for e, ts in sorted(by_exp.items())
    ]


def storage_mounts(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pure: the read-only bind mounts a TensorBoard in a container needs to read its sources'
    shared_fs storage (each `host_path` at the same path, as trials see it; object storage needs
    none). A process on an agent's host reads the same paths and ignores them."""
    storages = [s["storage"] for s in sources]
    paths = sorted(
        {
            str(st["host_path"])
            for st in storages
            if st.get("type", "shared_fs") == "shared_fs" and st.get("host_path")
        }
    )
    return [{"host_path": p, "container_path": p, "read_only": True} for p in paths]


def may_read_storage(
    storage: dict[str, Any], owner_id: int | None, user_id: int, admin: bool
) -> bool:
    """Pure: whether a user's TensorBoard may carry an experiment's storage config. The process
    runs the user's own environment (environment_variables can load their code), so it must not
    receive another user's storage credentials, which detlab never shows to other users."""
    has_secret = any(storage.get(k) for k in SECRET_KEYS)
    return admin or owner_id == user_id or not has_secret


def resolve_sources(
    experiment_ids: list[int], trial_ids: list[int], user_id: int = 0, admin: bool = True
) -> list[dict[str, Any]]:
    """The trials named (directly or by experiment), grouped by experiment; 404 naming any id
    that does not exist, 400 when none is named, 403 for another user's experiment whose
    storage config holds credentials."""
    if not experiment_ids and not trial_ids:
        raise BadRequest(
            "name at least one experiment or trial: det tensorboard start EXP_ID... | -t "
            "TRIAL_ID...",
            path="experiment_ids",
        )
    pairs: list[tuple[int, int]] = []
    for exp_id in experiment_ids:
        if db.session.get(Experiment, exp_id) is None:
            raise NotFound(f"experiment {exp_id} not found")
        ids = db.session.execute(select(Trial.id).where(Trial.experiment_id == exp_id)).scalars()
        pairs.extend((exp_id, t) for t in ids)
    for trial_id in trial_ids:
        trial = db.session.get(Trial, trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        pairs.append((trial.experiment_id, trial.id))
    if len(pairs) > MAX_TRIALS:
        raise BadRequest(f"a TensorBoard shows at most {MAX_TRIALS} trials, not {len(pairs)}")
    storages: dict[int, dict[str, Any]] = {}
    for exp_id in sorted({e for e, _ in pairs} | set(experiment_ids)):
        exp = db.session.get(Experiment, exp_id)
        assert exp is not None
        storage = exp.conf.checkpoint_storage.to_json()
        if not may_read_storage(storage, exp.owner_id, user_id, admin):
            raise Forbidden(
                f"experiment {exp_id} belongs to another user and its checkpoint storage config "
                "holds credentials: only its owner or an admin may start a TensorBoard over it"
            )
        storages[exp_id] = storage
    return group_sources(pairs, storages)


def parse_tensorboard_request(body: dict[str, Any]) -> dict[str, Any]:
    """Determined's `POST /api/v1/tensorboards` body: experiment_ids, trial_ids, config."""
    config = body.get("config")
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise BadRequest("config must be an object", path="config")
    config, warnings = split(config, TaskType.TENSORBOARD)
    description = config.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > 256):
        raise BadRequest(
            "description must be text of at most 256 characters", path="config.description"
        )
    resources = config.get("resources") or {}
    if not isinstance(resources, dict):
        raise BadRequest("resources must be an object", path="config.resources")
    resources = {"slots": 0, **resources}  # as Determined: TensorBoard needs no GPU
    resources, environment = parse_resources_environment({**config, "resources": resources})
    return {
        "experiment_ids": _ids(body.get("experiment_ids"), "experiment_ids"),
        "trial_ids": _ids(body.get("trial_ids"), "trial_ids"),
        "description": description,
        "resources": resources,
        "environment": environment,
        "idle_timeout": parse_duration(config.get("idle_timeout"), "config.idle_timeout"),
        "warnings": warnings,
    }


def create_tensorboard(
    owner_id: int, body: dict[str, Any], admin: bool = False
) -> tuple[Task, list[str]]:
    """The task, queued, and warnings naming the config keys it does not act on."""
    req = parse_tensorboard_request(body)
    req["idle_timeout"] = cluster_idle_timeout(req["idle_timeout"], "tensorboard_timeout")
    res = req["resources"]
    task_id = str(uuid.uuid4())
    with state_lock():
        sources = resolve_sources(req["experiment_ids"], req["trial_ids"], owner_id, admin)
        names = [f"{s['experiment_id']}" for s in sources]
        token = secrets.token_urlsafe(32)
        task = Task(
            id=task_id,
            type=TaskType.TENSORBOARD,
            state=TaskState.ACTIVE,
            owner_id=owner_id,
            name=req["description"] or f"TensorBoard (experiment {', '.join(names)[:200]})",
            resource_pool=res["resource_pool"],
            slots=res["slots"],
            priority=res["priority"],
            preemptible=res["preemptible"],
            spec={
                # python3: images have it (Debian's has no `python`); on a process agent it is
                # the agent's interpreter, as for notebooks.
                "entrypoint": ["python3", "-m", "harness.tb_serve"],
                "environment": req["environment"],
                "bind_mounts": storage_mounts(sources),
                "proxy": True,
                "idle_timeout": req["idle_timeout"],  # as a notebook's (master/services/idle)
                "experiment_ids": req["experiment_ids"],
                "trial_ids": sorted({t for s in sources for t in s["trial_ids"]}),
                # TensorBoard's token: the proxy adds it; no API answer ever carries it.
                "service_token": token,
                "service_env": {
                    "DET_TENSORBOARD_TOKEN": token,
                    "DET_TENSORBOARD_SOURCES": json.dumps(sources),
                },
            },
        )
        db.session.add(task)
        db.session.flush()
        born("task", task.id, TaskState.ACTIVE, "TensorBoard started")
        db.session.commit()
    request_schedule()
    return task, req["warnings"]
