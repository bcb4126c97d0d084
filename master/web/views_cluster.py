"""The cluster page: agents and slots, resource pools, and each pool's job queue."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from master.auth import can_steer
from master.errors import BadRequest, Forbidden
from master.provisioner.listing import pools_json
from master.services.agent.cluster_view import agents_overview, idle_but_allocated
from master.services.experiment.experiments import get_experiment
from master.services.queue import job_queue as job_svc
from master.services.queue.kicker import request_schedule
from master.web.blueprint import bp, safe_next
from master.web.session import current_user


def _context() -> dict:
    return {
        "agents": agents_overview(),
        "pools": job_svc.queue_jobs(),
        "provider_pools": pools_json(),
        "idle_but_allocated": idle_but_allocated,
    }


@bp.get("/cluster")
def cluster() -> ResponseReturnValue:
    return render_template("cluster.html", **_context())


@bp.get("/cluster/live")
def cluster_live() -> ResponseReturnValue:
    return render_template("_cluster_agents.html", **_context())


@bp.post("/jobs/<int:job_id>")
def update_job(job_id: int) -> ResponseReturnValue:
    """Change a job's priority or move it ahead of / behind another (owners and admins)."""
    exp = get_experiment(job_id)
    if not can_steer(current_user(), exp.owner_id):
        raise Forbidden(
            f"job {job_id} belongs to {exp.owner.username}; only its owner or an admin may "
            "change it"
        )
    body: dict = {}
    priority = (request.form.get("priority") or "").strip()
    if priority:
        try:
            body["priority"] = int(priority)
        except ValueError:
            raise BadRequest(f"priority must be an integer, got {priority!r}", "priority") from None
    for key in ("ahead_of", "behind_of"):
        other = (request.form.get(key) or "").strip()
        if other:
            body[key] = other
    if not body:
        raise BadRequest("give a priority, ahead_of or behind_of", path="priority")
    job_svc.update_job(str(job_id), body)
    request_schedule()
    flash(f"Job {job_id} updated.")
    return redirect(safe_next(request.form.get("next") or url_for("web.cluster")))
