"""Who may reach a proxied task, and where it listens.

`decide` is the rule (pure): a signed-in user (REST bearer token or web session) who owns the
task or is an admin reaches a running task of a proxied type whose agent reported its port.
`authorize` gathers the facts from the database inside a Flask app context (the proxy's
aiohttp thread calls it in an executor) and answers a `Target` or raises the API's errors:
401 without credentials, 403 for another user's task, 404 for no such task, 503 while the
task is not (yet) listening.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask

from master.errors import APIError, Forbidden, NotFound, Unauthenticated
from master.states import TaskState, TaskType

# Task types served through the proxy (a trial or a command is not).
PROXIED = frozenset({TaskType.NOTEBOOK, TaskType.SHELL, TaskType.TENSORBOARD})


class NotReady(APIError):
    status, code = 503, "not_ready"


@dataclass(frozen=True)
class Target:
    """Where a task listens and the token it expects (never shown to the user)."""

    task_id: str
    host: str
    port: int
    token: str
    # The caller came with the web session cookie (a browser): unsafe methods and WebSockets
    # must then come from the master's own pages (server.py checks the Origin).
    by_cookie: bool


@dataclass(frozen=True)
class Facts:
    """What the rule needs to know, gathered by `authorize`."""

    user_id: int | None  # None: no valid credentials
    admin: bool
    task_type: TaskType | None  # None: no such task
    task_state: TaskState | None
    owner_id: int | None
    host: str | None  # the task's agent's address
    port: int | None  # what the agent reported
    token: str | None


def decide(task_id: str, f: Facts) -> tuple[str, str] | APIError:
    """(host, token) for a reachable task, else the error to answer."""
    if f.user_id is None:
        return Unauthenticated(
            "sign in (the web pages) or send 'Authorization: Bearer <token>' (det user login)"
        )
    if f.task_type is None or f.task_type not in PROXIED:
        return NotFound(f"no notebook, shell or TensorBoard {task_id!r}")
    if not f.admin and f.owner_id != f.user_id:
        return Forbidden(f"task {task_id} belongs to another user")
    if f.task_state not in (TaskState.ACTIVE, TaskState.STOPPING):
        return NotFound(f"task {task_id} has ended ({f.task_state})")
    if not f.host or not f.port or not f.token:
        return NotReady(f"task {task_id} is not running yet; try again in a moment")
    return f.host, f.token


def _facts(task_id: str, authorization: str | None) -> tuple[Facts, bool]:
    from flask import request

    from master.auth import resolve
    from master.db import db
    from master.models import Agent, Task
    from master.services.task.allocations import containers_of
    from master.services.task.tasks import live_allocation_of
    from master.web.session import current_user

    by_cookie = False
    principal = None
    if authorization and authorization.startswith("Bearer "):
        principal = resolve(authorization[7:].strip())  # a bad token: 401 naming why
    elif request.cookies:
        principal = current_user()
        by_cookie = principal is not None
    user_id = principal.user_id if principal is not None and principal.kind == "user" else None
    task = db.session.get(Task, task_id) if "\x00" not in task_id else None
    host = port = token = None
    if task is not None and task.type in PROXIED:
        token = (task.spec or {}).get("service_token")
        alloc = live_allocation_of(task.id)
        for agent_id, container in (containers_of(alloc) if alloc else {}).items():
            port = container.get("proxy_port")
            agent = db.session.get(Agent, agent_id)
            host = agent.address if agent is not None else None
            if port:
                break
    facts = Facts(
        user_id=user_id,
        admin=bool(principal and principal.admin),
        task_type=task.type if task else None,
        task_state=task.state if task else None,
        owner_id=task.owner_id if task else None,
        host=host,
        port=port,
        token=token,
    )
    return facts, by_cookie


def authorize(app: Flask, task_id: str, authorization: str | None, cookie: str | None) -> Target:
    """The target of a proxied request, or the APIError to answer (raised)."""
    headers = {"Authorization": authorization or "", "Cookie": cookie or ""}
    with app.test_request_context("/proxy/", headers={k: v for k, v in headers.items() if v}):
        facts, by_cookie = _facts(task_id, authorization)
        answer = decide(task_id, facts)
    if isinstance(answer, APIError):
        raise answer
    host, token = answer
    assert facts.port is not None
    return Target(task_id, host, facts.port, token, by_cookie)
