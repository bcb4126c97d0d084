"""Health, login/logout and users."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from master import __version__
from master.api._util import json_body, require_str
from master.auth import bearer_token, principal, require_admin, require_user
from master.context import master_state
from master.errors import BadRequest
from master.services.agent import agent_users
from master.services.user import users as svc

bp = Blueprint("auth", __name__)


@bp.get("/health")
def health() -> ResponseReturnValue:
    return jsonify({"status": "ok", "version": __version__})


@bp.get("/master/stats")
def master_stats() -> ResponseReturnValue:
    """The scheduler tick's lateness, for operators and the load benchmark."""
    require_user()
    stats = master_state().lifecycle.tick_stats
    return jsonify({"scheduler_tick": stats.snapshot() if stats else {"ticks": 0}})


@bp.post("/auth/login")
def login() -> ResponseReturnValue:
    body = json_body()
    username = require_str(body, "username")
    password = body.get("password")
    if not isinstance(password, str):
        raise BadRequest("password is required", path="password")
    token, user = svc.log_in(username, password, request.remote_addr)
    return jsonify({"token": token, "user": user.to_json()})


@bp.post("/auth/logout")
def logout() -> ResponseReturnValue:
    require_user()
    token = bearer_token()
    assert token
    svc.log_out(token)
    return jsonify({})


@bp.get("/me")
def me() -> ResponseReturnValue:
    p = require_user()
    return jsonify({"user": svc.user_by_id(p.user_id).to_json()})


@bp.get("/users")
def list_users() -> ResponseReturnValue:
    require_user()
    return jsonify({"users": [u.to_json() for u in svc.all_users()]})


@bp.post("/users")
def create_user() -> ResponseReturnValue:
    require_admin()
    body = json_body()
    user = svc.create_user(
        require_str(body, "username"), body.get("password"), bool(body.get("admin"))
    )
    return jsonify({"user": user.to_json()}), 201


@bp.patch("/users/<username>")
def update_user(username: str) -> ResponseReturnValue:
    p = require_user()
    user, token = svc.update_user(username, json_body(), p, request.remote_addr)
    body: dict = {"user": user.to_json()}
    if token is not None:  # the caller's own session, reissued after a password change
        body["token"] = token
    return jsonify(body)


@bp.put("/users/<username>/agent-user-group")
def link_agent_user(username: str) -> ResponseReturnValue:
    """Determined's `det user link-with-agent-user`: the Unix user this user's trials run as."""
    require_admin()
    user = agent_users.link(username, json_body())
    return jsonify({"user": user.to_json()})


@bp.delete("/users/<username>/agent-user-group")
def unlink_agent_user(username: str) -> ResponseReturnValue:
    require_admin()
    return jsonify({"user": agent_users.unlink(username).to_json()})


__all__ = ["bp", "principal"]
