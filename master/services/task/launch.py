"""What an agent is told to start: the launch spec of one container of an allocation."""

from __future__ import annotations

import json

from flask import current_app

from detlab.entrypoint import TRIAL_CLASS
from detlab.protocol import StartSpec
from master.auth import new_token
from master.db import db
from master.models import Agent, Allocation, Trial
from master.services.agent.agent_users import task_user
from master.services.task.allocations import containers_of

# A Trial class entrypoint (`model_def:MyTrial`) runs through the harness's launcher.


def command_for(entrypoint: str) -> str:
    if TRIAL_CLASS.match(entrypoint.strip()):
        return f"python3 -m harness.launch {entrypoint.strip()}"
    return entrypoint


def container_addrs(containers: dict[str, dict], agent_id: str) -> list[str]:
    """The address of each container of the allocation, in container-rank order (Determined's
    `ClusterInfo.container_addrs`): the address its agent polls the master from."""
    ranked = sorted(containers.items(), key=lambda kv: int(kv[1].get("rank", 0))) or [
        (agent_id, {})
    ]
    out = []
    for aid, _ in ranked:
        agent = db.session.get(Agent, aid)
        out.append((agent.address or agent.hostname or "") if agent else "")
    return out


def start_spec(alloc: Allocation, agent_id: str) -> StartSpec:
    """What `agent_id` needs to start its container of this allocation (fresh session token)."""
    containers = containers_of(alloc)
    mine = containers.get(agent_id) or {"rank": 0, "slots": list(alloc.slot_indexes)}
    if alloc.trial_id is None:  # a command (the only other task type that runs so far)
        from master.services.task.commands import command_start_spec

        return command_start_spec(alloc, agent_id, int(mine["rank"]), list(mine["slots"]))
    trial = db.session.get(Trial, alloc.trial_id)
    assert trial is not None
    exp = trial.experiment
    token = new_token(allocation_id=alloc.id)
    conf = exp.conf
    env = {
        "DET_SESSION_TOKEN": token,
        "DET_EXPERIMENT_ID": str(exp.id),
        "DET_TRIAL_ID": str(trial.id),
        "DET_TRIAL_REQUEST_ID": trial.request_id,
        "DET_ALLOCATION_ID": alloc.id,
        "DET_TRIAL_SEED": str(trial.seed),
        "DET_TRIAL_RESTARTS": str(trial.restarts),
        "DET_HPARAMS": json.dumps(trial.hparams),
        "DET_LATEST_CHECKPOINT": trial.latest_checkpoint or "",
        "DET_SLOT_IDS": json.dumps(list(mine["slots"])),
        "DET_CONTAINER_RANK": str(mine["rank"]),
        "DET_NUM_CONTAINERS": str(len(containers)),
        "DET_CONTAINER_ADDRS": json.dumps(container_addrs(containers, agent_id)),
        "DET_EXPERIMENT_CONFIG": json.dumps(exp.config),
    }
    return StartSpec(
        allocation_id=alloc.id,
        trial_id=trial.id,
        experiment_id=exp.id,
        entrypoint=command_for(conf.entrypoint),
        slot_indexes=tuple(mine["slots"]),
        env=env,
        environment=conf.environment.to_json(),
        bind_mounts=[m.to_json() for m in conf.bind_mounts],
        checkpoint_storage=conf.checkpoint_storage.to_json(),
        model_def_url=f"/api/v1/experiments/{exp.id}/model_def" if exp.model_def_sha256 else None,
        model_def_sha256=exp.model_def_sha256,
        user=task_user(exp.owner, current_app.config["DET"].agent_user_group),
    )
