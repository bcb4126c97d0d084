"""REST: the provider pools with their instances and launch errors; an agent's spot notice."""

from __future__ import annotations

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from master.auth import require_agent, require_user
from master.provisioner.interruption import interrupted
from master.provisioner.listing import pools_json

bp = Blueprint("provisioner", __name__)


@bp.get("/provisioner/pools")
def list_pools() -> ResponseReturnValue:
    require_user()
    return jsonify({"pools": pools_json()})


@bp.post("/agents/<agent_id>/interruption")
def interruption(agent_id: str) -> ResponseReturnValue:
    """The agent saw its instance's spot/preemptible interruption notice."""
    require_agent(agent_id)
    return jsonify(interrupted(agent_id))
