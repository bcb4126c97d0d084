"""Which Unix identity a task runs as on this agent (docs/security.md).

A trial is someone's untrusted code. An agent that may switch identities (root, or
CAP_SETUID + CAP_SETGID) runs each task as the Unix user its detlab user is linked to (`det
user link-with-agent-user`, or the master's `agent_user_group` default), else as an identity
derived for that detlab user: uid = gid = `derived_base` + the user's id. Per user rather than
per allocation, on purpose: a user's later trials must read the checkpoints their earlier trials
wrote on shared_fs (to resume, to fine-tune), while another user's trials must not; a
per-allocation identity would make every checkpoint unreadable to its own user's next trial.

An agent run by an ordinary user cannot switch: it says so at start and runs only tasks of the
detlab user linked to its own uid, unless its operator opted in to a shared, unisolated agent
(`--shared-unisolated`), where every task runs as the agent itself.

`plan` is pure; `Isolation.detect` reads the process's capabilities.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from detlab.protocol import IsolationMode as Mode
from detlab.protocol import StartSpec, TaskAcceptance

__all__ = ["DERIVED_UID_BASE", "IdentityRefused", "Isolation", "Mode", "TaskIdentity"]

DERIVED_UID_BASE = 2_000_000_000  # far above useradd's ranges; below 2**31 for old tools
_CAP_SETGID, _CAP_SETUID = 6, 7


class IdentityRefused(Exception):
    """This agent must not run the task (the message says why and what to do)."""


@dataclass(frozen=True)
class TaskIdentity:
    uid: int
    gid: int
    name: str | None  # the Unix user's name when it has one
    home: str | None  # its home directory when it has one (else the task's work dir)
    # Give it a /proc showing only its own uid's processes (process runtime; a container has
    # its own PID namespace already).
    hide_processes: bool = False


@dataclass(frozen=True)
class Isolation:
    mode: Mode
    agent_uid: int
    agent_gid: int
    derived_base: int = DERIVED_UID_BASE
    # Isolated tasks get a /proc of their own showing only their uid's processes
    # (agent/runtime/_procfs.py); needs CAP_SYS_ADMIN too (root has it).
    hide_processes: bool = False

    @classmethod
    def detect(cls, *, shared: bool, derived_base: int = DERIVED_UID_BASE) -> Isolation:
        """How this process can isolate tasks (`shared`: the operator's --shared-unisolated)."""
        from agent.runtime import _procfs

        if shared:
            mode = Mode.SHARED
        elif can_switch_identity():
            mode = Mode.ISOLATED
        else:
            mode = Mode.OWN_USER
        hide = mode == Mode.ISOLATED and _procfs.available()
        return cls(mode, os.getuid(), os.getgid(), derived_base, hide)

    def acceptance(self) -> TaskAcceptance:
        """What the agent tells the master in its polls: the scheduler then places only the
        tasks `plan` would accept."""
        return TaskAcceptance(self.mode, self.agent_uid)

    def describe(self) -> str:
        if self.mode == Mode.ISOLATED:
            procs = (
                "other processes are hidden from them (a /proc of their own, hidepid=2)"
                if self.hide_processes
                else "they still see other processes in /proc (hiding them needs CAP_SYS_ADMIN)"
            )
            return (
                "isolated: each user's trials run as their linked Unix user, else as uid "
                f"{self.derived_base} + their detlab user id; {procs}"
            )
        if self.mode == Mode.OWN_USER:
            return (
                f"NOT isolated: this agent runs as uid {self.agent_uid} without CAP_SETUID/"
                "CAP_SETGID, so it cannot run trials as other users; it accepts only trials of "
                f"the detlab user linked to uid {self.agent_uid} (run it as root to isolate, or "
                "pass --shared-unisolated to run everyone's trials as itself)"
            )
        return (
            f"NOT isolated (--shared-unisolated): every trial runs as this agent's uid "
            f"{self.agent_uid} and can read the agent's credential and other trials' data"
        )

    def plan(self, spec: StartSpec) -> TaskIdentity | None:
        """The identity to run `spec` as; None: as the agent itself. Raises IdentityRefused."""
        if self.mode == Mode.SHARED:
            return None
        user = spec.user
        if user is None:
            raise IdentityRefused(
                "the master did not say whose task this is (a master older than this agent?): "
                "refusing to run it on an isolating agent"
            )
        if self.mode == Mode.OWN_USER:
            if user.uid != self.agent_uid:
                linked = f"uid {user.uid}" if user.uid is not None else "no Unix user"
                raise IdentityRefused(
                    f"this agent cannot isolate trials (it runs as uid {self.agent_uid} without "
                    f"CAP_SETUID) and runs only trials of users linked to uid {self.agent_uid}; "
                    f"{user.username} is linked to {linked}"
                )
            return None
        if user.uid is not None and user.gid is not None:
            if user.uid in (0, self.agent_uid):
                raise IdentityRefused(
                    f"{user.username} is linked to uid {user.uid}, the agent's own or root's: "
                    "its trials could act as the agent (link it to an ordinary Unix user)"
                )
            return TaskIdentity(
                user.uid, user.gid, user.unix_user, _home(user.uid), self.hide_processes
            )
        uid = self.derived_base + user.user_id
        return TaskIdentity(uid, uid, None, None, self.hide_processes)


def _home(uid: int) -> str | None:
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None
    return home if home and os.path.isdir(home) else None


def can_switch_identity() -> bool:
    """Root, or both CAP_SETUID and CAP_SETGID in the effective set."""
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    caps = int(line.split()[1], 16)
                    return bool(caps >> _CAP_SETUID & 1 and caps >> _CAP_SETGID & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def unreachable_ancestors(path: str) -> list[str]:
    """The directories on the way to `path` that another uid cannot pass (no o+x)."""
    out = []
    current = os.path.abspath(path)
    while True:
        try:
            if not os.stat(current).st_mode & 0o001:
                out.append(current)
        except OSError:
            pass
        parent = os.path.dirname(current)
        if parent == current:
            return out
        current = parent
