"""Agents: the poll (registration, heartbeat, work), log shipping, and the listing for people."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from master.api._guard import sanitises_text
from master.api._util import bool_arg, int_arg, json_body
from master.auth import require_admin, require_agent, require_user
from master.errors import BadRequest
from master.services.agent import agent_credentials, agent_listing
from master.services.agent import agents as svc
from master.services.trial.logs import TAIL_MAX, agent_log_tail, ingest_agent_logs

bp = Blueprint("agents", __name__)


def _check_id(agent_id: str) -> None:
    if (
        len(agent_id) > 128
        or not agent_id.replace("-", "").replace("_", "").replace(".", "").isalnum()
    ):
        raise BadRequest(
            "agent id may use letters, digits, '-', '_' and '.' (at most 128)", path="agent_id"
        )


@bp.post("/agents/<agent_id>/poll")
@sanitises_text  # exit reasons quote trial output: a NUL there must not fail every poll
def poll(agent_id: str) -> ResponseReturnValue:
    require_agent(agent_id)
    _check_id(agent_id)
    payload = svc.parse_poll(request.get_json(silent=True))
    # Where trials of this agent are reached (ClusterInfo.container_addrs).
    reply = svc.handle_poll(agent_id, payload, remote_addr=request.remote_addr)
    return jsonify(reply.to_json())


@bp.post("/agents/<agent_id>/credential")
def issue_credential(agent_id: str) -> ResponseReturnValue:
    """The join token exchanged for this agent id's own credential (once: 409 after that)."""
    require_agent(agent_id, joining=True)
    _check_id(agent_id)
    return jsonify({"agent_id": agent_id, "credential": agent_credentials.issue(agent_id)}), 201


@bp.delete("/agents/<agent_id>/credential")
def reset_credential(agent_id: str) -> ResponseReturnValue:
    """An admin forgets an agent's credential (lost, or leaked): it may join again."""
    require_admin()
    _check_id(agent_id)
    agent_credentials.reset(agent_id)
    return jsonify({})


@bp.post("/agents/<agent_id>/logs")
@sanitises_text  # one line with a NUL must not fail (and re-send forever) the whole batch
def logs(agent_id: str) -> ResponseReturnValue:
    require_agent(agent_id)
    _check_id(agent_id)
    return jsonify({"accepted": ingest_agent_logs(agent_id, json_body().get("logs"))})


@bp.get("/agents/<agent_id>/allocations/<alloc_id>/logs")
def log_tail(agent_id: str, alloc_id: str) -> ResponseReturnValue:
    """The newest lines this agent shipped for the allocation (for re-attaching exactly)."""
    require_agent(agent_id)
    _check_id(agent_id)
    limit = int_arg("limit", 1000, 1, TAIL_MAX)
    return jsonify({"logs": agent_log_tail(agent_id, alloc_id, limit)})


@bp.get("/agents")
def list_agents() -> ResponseReturnValue:
    require_user()
    # ?all=true: LOST agents gone longer than lost_agent_retention too.
    return jsonify({"agents": agent_listing.list_agents(all_agents=bool_arg("all", False))})
