"""The agent's own credential: the cluster's join token exchanged, once, for a credential bound
to this agent's id (master/services/agent/agent_credentials.py).

The credential lives in `<data-dir>/agent-<id>.credential`, mode 0600 and owned by the agent's
uid, which no trial runs as on an isolating agent. The join token is needed only for the
exchange: from then on the master refuses it for this agent id. A lost credential file is not
replaced by presenting the join token again (that would let anyone who ever learnt the join
token take over the agent id): an admin runs `det agent reset-credential ID`, then the agent's
next start exchanges the join token anew.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from urllib.parse import quote

from agent.client import Backoff, is_transient
from harness.api import APIError, Conflict, Session

log = logging.getLogger(__name__)


class CredentialError(Exception):
    """The agent cannot get a credential; the message says what the operator should do."""


def credential_path(data_dir: Path, agent_id: str) -> Path:
    return data_dir / f"agent-{re.sub(r'[^A-Za-z0-9._-]', '_', agent_id)}.credential"


def read_credential(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def save_credential(path: Path, credential: str) -> None:
    """Write the credential 0600 (created so: never readable by others, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(credential + "\n")
    os.replace(tmp, path)


def exchange(master: str, join_token: str, agent_id: str, path: Path) -> str:
    """POST the join token for this agent id's credential and keep it at `path`.

    Retries while the master is unreachable; raises CredentialError when it refuses."""
    session = Session(master, join_token)
    backoff = Backoff(first=1.0, cap=10.0)
    while True:
        try:
            reply = session.post(f"/agents/{quote(agent_id, safe='')}/credential")
            break
        except Conflict as e:
            raise CredentialError(
                f"the master has already issued a credential to agent {agent_id}, and this "
                f"agent does not have it ({path}); an admin resets it with "
                f"`det agent reset-credential {agent_id}`, then restart this agent ({e})"
            ) from None
        except APIError as e:
            if is_transient(e):
                _wait(backoff, e)
                continue
            raise CredentialError(
                f"the master at {master} refused this agent's join token (HTTP {e.status}: {e}); "
                "give it the cluster's agent token (DET_AGENT_TOKEN, or agent_token in the "
                "master's --data-dir on the master's machine)"
            ) from None
        except Exception as e:
            if not is_transient(e):
                raise
            _wait(backoff, e)
    credential = str(reply.get("credential") or "") if isinstance(reply, dict) else ""
    if not credential:
        raise CredentialError("the master's answer holds no credential")
    save_credential(path, credential)
    log.info("exchanged the join token for this agent's own credential (kept in %s)", path)
    return credential


def _wait(backoff: Backoff, err: BaseException) -> None:
    delay = backoff.next()
    log.warning("cannot reach the master for a credential (%s): retrying in %.0f s", err, delay)
    time.sleep(delay)
