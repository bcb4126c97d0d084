"""Allocations: the harness's preemption long poll and its acknowledgement."""

from __future__ import annotations

import time

from flask import Blueprint, Response, jsonify

from master.api._util import float_arg, json_body
from master.auth import principal, require_allocation
from master.context import master_state
from master.db import db
from master.errors import BadRequest, Forbidden
from master.models import Allocation
from master.notify import hub, preempt_key
from master.services.task.allocations import (
    containers_of,
    get_allocation,
    harness_reported,
    wants_stop,
)

bp = Blueprint("allocations", __name__)


def _own(alloc_id: str) -> Allocation:
    """Reading: the allocation's own token or any user; writers also `require_allocation`."""
    p = principal()
    if p.kind == "allocation" and p.allocation_id != alloc_id:
        raise Forbidden("this session token belongs to another allocation")
    if p.kind == "agent":
        raise Forbidden("this route is for trials and users")
    return get_allocation(alloc_id)


@bp.get("/allocations/<alloc_id>/preemption")
def preemption(alloc_id: str) -> Response:
    timeout = float_arg("timeout", 30.0, 0.0, 60.0)
    seen = hub().version(preempt_key(alloc_id))
    alloc = _own(alloc_id)
    if principal().kind == "allocation":  # the harness's first poll is its first report
        harness_reported(alloc)
    if wants_stop(alloc) or timeout == 0:
        return jsonify({"preempt": wants_stop(alloc)})
    db.session.commit()
    hub().wait(preempt_key(alloc_id), seen, timeout)
    db.session.expire_all()
    alloc = _own(alloc_id)
    return jsonify({"preempt": wants_stop(alloc)})


@bp.post("/allocations/<alloc_id>/ack_preemption")
def ack(alloc_id: str) -> Response:
    require_allocation(alloc_id)
    _own(alloc_id)  # the harness acknowledges; the exit that follows is what the master acts on
    return jsonify({})


@bp.post("/allocations/<alloc_id>/rendezvous")
def post_rendezvous(alloc_id: str) -> Response:
    require_allocation(alloc_id)  # an address posted by anyone else would hijack the workers
    alloc = _own(alloc_id)
    body = json_body()
    rank, addr, port = body.get("container_rank"), body.get("addr"), body.get("port", 0)
    n = len(containers_of(alloc))
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:
        raise BadRequest(f"container_rank must be an integer in [0, {n})", path="container_rank")
    if not isinstance(addr, str) or not addr:
        raise BadRequest("addr is required", path="addr")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise BadRequest("port must be an integer in [0, 65535]", path="port")
    timeout = float_arg("timeout", 60.0, 0.0, 300.0)
    key = f"rendezvous:{alloc_id}"
    meeting = master_state().rendezvous
    meeting.post(alloc_id, rank, f"{addr}:{port}" if port else addr)
    hub().notify(key)
    db.session.commit()
    deadline = time.monotonic() + timeout
    while True:
        seen = hub().version(key)
        got = meeting.addresses(alloc_id)
        if len(got) >= n:
            return jsonify({"ready": True, "addrs": [got[r] for r in range(n)]})
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return jsonify({"ready": False, "addrs": []})
        hub().wait(key, seen, remaining)
