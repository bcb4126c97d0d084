"""Which Unix identity a user's trials run as on agents.

Determined's model: an admin links a user to an agent user (`det user link-with-agent-user
NAME --agent-uid --agent-gid --agent-user --agent-group`); an unlinked user's trials run as the
master's `agent_user_group` default when it sets one, else as an identity the agent derives for
that user (agent/identity.py), never as the agent itself.
"""

from __future__ import annotations

from typing import Any

from detlab.protocol import TaskUser
from master.config import AGENT_USER_GROUP_FIELDS as FIELDS
from master.config import AgentUserGroupError, parse_agent_user_group
from master.db import db
from master.errors import BadRequest
from master.models import User
from master.services.user.users import get_user


def link(username: str, body: Any) -> User:
    user = get_user(username)
    try:
        fields = parse_agent_user_group(body)
    except AgentUserGroupError as e:
        raise BadRequest(str(e), path=e.path) from None
    for name, value in fields.items():
        setattr(user, name, value)
    db.session.commit()
    return user


def unlink(username: str) -> User:
    user = get_user(username)
    for name in FIELDS:
        setattr(user, name, None)
    db.session.commit()
    return user


def task_user(user: User, default: dict[str, Any] | None) -> TaskUser:
    """What an agent is told about who runs a task of `user`."""
    if user.agent_uid is not None and user.agent_gid is not None:
        linked: dict[str, Any] = {
            "agent_uid": user.agent_uid,
            "agent_gid": user.agent_gid,
            "agent_user": user.agent_user,
            "agent_group": user.agent_group,
        }
    else:
        linked = default or {}
    return TaskUser(
        user_id=user.id,
        username=user.username,
        uid=linked.get("agent_uid"),
        gid=linked.get("agent_gid"),
        unix_user=linked.get("agent_user"),
        unix_group=linked.get("agent_group"),
    )
