"""The warm-start server: a Python interpreter that forks trial processes with imports done.

Started by the process runtime (`python _zygote.py <socket fd>`, by path so that no package
`__init__` runs here). It imports the harness's dependencies (requests, urllib3, yaml, ...)
once, drops the `harness` package itself so that every trial imports its own copy under its own
environment, and then serves requests on a SOCK_SEQPACKET unix socket:

  -> {"op": "spawn", "id": n, "kind": "path"|"module", "target": ..., "args": [...],
      "cwd": ..., "env": {...}, "uid": n|null, "gid": n|null}  with the trial's stdout and
      stderr fds attached
  <- {"id": n, "pid": pid}  or  {"id": n, "error": "..."}
  <- {"exit": pid, "code": returncode}  when a trial exits (negative: killed by that signal)

A forked trial starts in a new session (so the agent can kill its process group), drops to its
own Unix identity when it has one (groups, gid, uid; umask 077), dies with this server
(PR_SET_PDEATHSIG, set after the identity change, which clears it), gets the trial's cwd,
environment, argv and sys.path, and runs its script or module as `__main__`; an uncaught
exception or SystemExit then ends it exactly as it would end a fresh interpreter. `random`
reseeds itself in every fork. Only standard-library code lives here: it runs before anything
else is imported.
"""

from __future__ import annotations

import ctypes
import importlib.util
import io
import json
import os
import runpy
import select
import signal
import socket
import sys
import types
from typing import Any

PRELOAD = ("harness", "harness.core", "harness.api")
MAX_MESSAGE = 4 * 1024 * 1024
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4


def _preload() -> None:
    """Import the harness's dependencies, then forget the harness itself."""
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception as e:  # a broken preload only costs speed
            print(f"warm start: cannot preload {name}: {e}", file=sys.stderr, flush=True)
    for name in [m for m in sys.modules if m == "harness" or m.startswith("harness.")]:
        del sys.modules[name]


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.send(json.dumps(msg).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(sock: socket.socket) -> dict[str, Any] | None:
    """Answer requests until the agent hangs up (None); in a forked child, return its job."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock not in ready:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 2)
        except OSError:
            return None
        if not data:
            return None
        job = json.loads(data)
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            _send(sock, {"id": job["id"], "error": f"fork failed: {e}"})
            continue
        if pid == 0:
            signal.set_wakeup_fd(-1)
            for fd in (wake_r, wake_w):
                os.close(fd)
            sock.close()
            job["fds"] = fds
            return job
        for fd in fds:
            os.close(fd)
        _send(sock, {"id": job["id"], "pid": pid})


def _become_trial(job: dict[str, Any]) -> None:
    """Turn this fork into the trial's process: session, identity, streams, signals, env, cwd,
    sys.path."""
    os.setsid()
    try:
        libc: Any = ctypes.CDLL(None, use_errno=True)
    except OSError:
        libc = None
    if job.get("hide_processes"):
        _hide_other_processes()
    if job.get("uid") is not None:
        _drop_to(int(job["uid"]), int(job["gid"]), libc)
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    out, err = job["fds"]
    devnull = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(src, dst)
    for fd in (devnull, out, err):
        if fd > 2:
            os.close(fd)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(job["cwd"])
    old_pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ.clear()
    os.environ.update(job["env"])
    new_pythonpath = [p for p in job["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in sys.path[1:] if p not in old_pythonpath]
    first = (
        os.path.dirname(os.path.abspath(job["target"])) if job["kind"] == "path" else os.getcwd()
    )
    sys.path[:] = [first, *(os.path.abspath(p) for p in new_pythonpath), *base]
    sys.path_importer_cache.clear()
    # Unbuffered, as PYTHONUNBUFFERED makes a fresh interpreter: lines reach the log at once.
    encoding = job["env"].get("PYTHONIOENCODING") or "utf-8"
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(  # type: ignore[misc]  # final in typeshed
        io.FileIO(1, "wb", closefd=False), encoding=encoding, write_through=True
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(  # type: ignore[misc]  # final in typeshed
        io.FileIO(2, "wb", closefd=False),
        encoding=encoding,
        errors="backslashreplace",
        write_through=True,
    )
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(  # type: ignore[misc]  # final in typeshed
        io.BufferedReader(io.FileIO(0, "rb", closefd=False)), encoding=encoding
    )


def _load_procfs() -> Any:
    """agent/runtime/_procfs.py, loaded by path: this server runs as a script, without the
    `agent` package on its path (and must not put it on the trials')."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_procfs.py")
    spec = importlib.util.spec_from_file_location("_detlab_procfs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_PROCFS = _load_procfs()  # before any fork: a trial's fork only calls into it


def _hide_other_processes() -> None:
    """A /proc of its own (agent/runtime/_procfs.py), while still root; a failure ends the
    fork rather than run the trial seeing everyone's processes."""
    try:
        _PROCFS.hide_other_processes()
    except OSError as e:
        os.write(2, f"cannot hide other processes from the trial: {e}\n".encode())
        os._exit(126)


def _drop_to(uid: int, gid: int, libc: Any) -> None:
    """Become `uid`:`gid` for good (no supplementary groups); a failure ends the fork."""
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as e:
        os.write(2, f"cannot run the trial as {uid}:{gid}: {e}\n".encode())
        os._exit(126)
    os.umask(0o077)
    if libc is not None:
        # What exec would do: the identity change left it undumpable (its /proc files root's),
        # which breaks tools that read their own /proc; nothing privileged is left to protect.
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)


def run_trial(job: dict[str, Any]) -> None:
    """Run the job's script or module as `__main__`; exceptions end it like a fresh start."""
    _become_trial(job)
    sys.argv = [job["target"], *job["args"]]
    try:
        if job["kind"] == "module":
            runpy.run_module(job["target"], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(job["target"], run_name="__main__")
    except Exception as e:  # SystemExit and KeyboardInterrupt keep Python's own handling
        # What `python3 train.py` would print: the user's frames, not this server's and runpy's.
        e.__traceback__ = user_frames(e.__traceback__)
        sys.excepthook(type(e), e, e.__traceback__)
        raise SystemExit(1) from None  # as a fresh interpreter: atexit runs, exit code 1


_WARM_FILES = {
    os.path.abspath(__file__),
    os.path.abspath(runpy.__file__ or ""),
}


def user_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` without its leading frames of the warm-start server and runpy."""
    t = tb
    while t is not None and _is_warm(t.tb_frame.f_code.co_filename):
        t = t.tb_next
    return t if t is not None else tb


def _is_warm(filename: str) -> bool:
    return filename == "<frozen runpy>" or os.path.abspath(filename) in _WARM_FILES


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    _preload()
    job = serve(sock)
    if job is None:
        return
    run_trial(job)


if __name__ == "__main__":
    main()
