"""The job queue per resource pool, and steering jobs in it."""

from __future__ import annotations

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from master.api._util import json_body, str_arg
from master.auth import require_user
from master.errors import BadRequest, Forbidden, NotFound
from master.services.experiment.experiments import get_experiment
from master.services.queue import job_queue as svc
from master.services.queue.kicker import request_schedule
from master.services.task.tasks import task_exists

bp = Blueprint("jobs", __name__)


@bp.get("/job-queues")
def job_queues() -> ResponseReturnValue:
    require_user()
    return jsonify({"pools": svc.queue_jobs(str_arg("pool") or None)})


@bp.patch("/jobs/<job_id>")
def update(job_id: str) -> ResponseReturnValue:
    p = require_user()
    try:
        exp = get_experiment(int(job_id))
    except ValueError:
        if task_exists(job_id):
            raise BadRequest(
                f"job {job_id} is a task, not an experiment; only an experiment's job can be "
                "changed (a command's request is fixed when it is submitted)"
            ) from None
        raise NotFound(f"job {job_id} not found") from None
    if not p.admin and exp.owner_id != p.user_id:
        raise Forbidden(
            f"job {job_id} belongs to {exp.owner.username}; "
            "only its owner or an admin may change it"
        )
    before = exp.priority
    body = json_body()
    svc.update_job(job_id, body)
    request_schedule()
    job = svc.find_job(job_id) or {"job_id": job_id, "experiment_id": exp.id, "state": None}
    notes = []
    if exp.priority != before and "priority" not in body:
        # --ahead-of/--behind-of move a job among the jobs of the other's priority.
        other = body.get("ahead_of") or body.get("behind_of")
        notes.append(
            f"priority changed from {before} to {exp.priority} (the priority of job {other}): "
            "a job is ordered only among jobs of its priority"
        )
    return jsonify({"job": job, "previous_priority": before, "notes": notes})
