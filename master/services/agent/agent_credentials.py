"""Per-agent credentials: an agent exchanges the cluster's join token for a credential bound to
its id, once; from then on only that credential acts as the agent (master/auth.require_agent).

A credential that is lost (the agent's data dir wiped) is not re-issued to whoever presents the
join token: that would let anyone who ever learnt the join token take over a registered agent.
An admin resets it (`det agent reset-credential ID`), and the agent's next start exchanges the
join token again.
"""

from __future__ import annotations

import logging

from master.auth import new_agent_credential, token_cache
from master.db import db
from master.errors import Conflict, NotFound
from master.models import AgentCredential

log = logging.getLogger(__name__)


def issue(agent_id: str) -> str:
    """A new credential for `agent_id` (committed); Conflict when it already has one."""
    if db.session.get(AgentCredential, agent_id) is not None:
        raise Conflict(
            f"agent {agent_id} already has a credential (kept in its data dir); if it is lost, "
            f"an admin resets it: det agent reset-credential {agent_id}"
        )
    credential, digest = new_agent_credential()
    db.session.add(AgentCredential(agent_id=agent_id, credential_hash=digest))
    db.session.commit()
    log.info("issued a credential to agent %s", agent_id)
    return credential


def reset(agent_id: str) -> None:
    """Forget `agent_id`'s credential (committed): it stops working at once."""
    if db.session.get(AgentCredential, agent_id) is None:
        raise NotFound(f"agent {agent_id} has no credential")
    forget(agent_id)
    db.session.commit()
    log.info("reset the credential of agent %s", agent_id)


def forget(agent_id: str) -> bool:
    """Drop `agent_id`'s credential in the caller's transaction (False: it had none). Evicted
    from the token cache now; one that a request reads again before the caller commits lives in
    that cache for at most its TTL (5 s), as with any revocation."""
    row = db.session.get(AgentCredential, agent_id)
    if row is None:
        return False
    token_cache().evict(row.credential_hash)
    db.session.delete(row)
    log.info("revoked the credential of agent %s", agent_id)
    return True
