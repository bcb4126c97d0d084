"""Hide other users' processes from a trial: a mount namespace of its own whose /proc shows
only the processes of the trial's own uid (docs/security.md, "Other processes").

Without it a trial lists every process on the host and reads their command lines (the kernel
lets any uid read /proc/PID/cmdline). A fresh procfs instance mounted with `hidepid=2` over
/proc, in a mount namespace private to the trial (mounts propagate into it from the host, never
out of it), shows the trial its own processes only: other users' trials, the agent and the
master are not there at all. Chosen over a PID namespace on the merits: it needs no init process
in between (a PID namespace's first process ignores signals it has no handler for, so the
trial could not be its pid 1, and a forwarding init would stand between the agent and the
trial's exit code, its signals and PR_SET_PDEATHSIG), so warm starts, exit codes, preemption,
kill and log shipping are exactly as before. What it does not hide: that a pid exists
(`kill(pid, 0)` answers EPERM, not ESRCH) and host-wide counters (/proc/loadavg, /proc/stat).

Runs in the freshly forked child while it is still root (mounting needs CAP_SYS_ADMIN), before
it drops to the trial's identity. Linux only; `available` says whether this agent can.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_SLAVE = 2, 4, 8, 16384, 1 << 19

try:  # loaded once in the agent: a child forked from a threaded process must not dlopen
    _LIBC: Any = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


def hide_other_processes() -> None:
    """Give the calling process (a fresh fork, still privileged) its own /proc showing only
    processes of the uid it will run as. Raises OSError naming the step that failed."""
    libc = _LIBC
    if libc is None:
        raise OSError("no C library to call unshare(2) with")
    if libc.unshare(CLONE_NEWNS) != 0:
        _fail("unshare(CLONE_NEWNS)")
    # Slave, not private: the host's later mounts (an automounted shared_fs) still appear here.
    if libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None) != 0:
        _fail("making / a slave mount")
    opts = MS_NOSUID | MS_NODEV | MS_NOEXEC
    if libc.mount(b"proc", b"/proc", b"proc", opts, b"hidepid=2") != 0:
        _fail("mounting /proc with hidepid=2")


def _fail(step: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{step}: {os.strerror(err)}")


def available() -> bool:
    """Whether this process can hide other processes from its children (tried in a child)."""
    if _LIBC is None:
        return False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's exit status is the answer
        try:
            hide_other_processes()
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0
