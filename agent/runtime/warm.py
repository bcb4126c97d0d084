"""Warm starts: fork Python trials from an interpreter that has already imported the harness's
dependencies, instead of paying interpreter start-up and `import requests` for every trial.

The process runtime uses this for entrypoints of the form `python3 script.py ...` or
`python3 -m module ...` whose `python3` is the agent's own interpreter; everything else (and a
trial that sets `DET_WARM_START=0`) starts cold with subprocess. The server is `_zygote.py`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agent.identity import TaskIdentity

log = logging.getLogger(__name__)

SERVER = Path(__file__).with_name("_zygote.py")
# Interpreter settings a forked trial would silently inherit from the server instead of its own
# environment: a trial that sets one of them differently starts cold.
_STARTUP_VARS = (
    "PYTHONHASHSEED",
    "PYTHONOPTIMIZE",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONWARNINGS",
    "PYTHONFAULTHANDLER",
    "PYTHONMALLOC",
    "PYTHONDEVMODE",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONUSERBASE",
    "PYTHONHOME",
    "PYTHONPLATLIBDIR",
    "PYTHONUTF8",
    "PYTHONINSPECT",
    "PYTHONVERBOSE",
    "PYTHONTRACEMALLOC",
    "PYTHONPROFILEIMPORTTIME",
    "PYTHONNODEBUGRANGES",
    "PYTHONSTARTUP",
    "PYTHONBREAKPOINT",
    "PYTHONINTMAXSTRDIGITS",
)


@dataclass(frozen=True)
class WarmForm:
    """What a warm-startable argv runs: a script path or a module, and its arguments."""

    kind: str  # "path" | "module"
    target: str
    args: list[str]


def warm_form(
    argv: list[str], env: dict[str, str], cwd: Path, server_env: dict[str, str]
) -> WarmForm | None:
    """The warm form of `argv`, or None when it must start cold.

    Only `python [-u] script ...` and `python [-u] -m module ...` where `python` resolves (on the
    trial's PATH) to this interpreter, and where no interpreter start-up variable differs.
    """
    if env.get("DET_WARM_START", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if not argv or any(env.get(v) != server_env.get(v) for v in _STARTUP_VARS):
        return None
    exe = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
    if exe is None or not _same_file(exe, sys.executable):
        return None
    rest = argv[1:]
    while rest and rest[0] == "-u":
        rest = rest[1:]
    if not rest:
        return None
    if rest[0] == "-m":
        if len(rest) < 2 or not rest[1] or rest[1].startswith("-"):
            return None
        return WarmForm("module", rest[1], rest[2:])
    if rest[0].startswith("-"):
        return None
    script = Path(rest[0]) if os.path.isabs(rest[0]) else cwd / rest[0]
    if not script.is_file():
        return None  # let the cold start report the missing file in Python's own words
    return WarmForm("path", rest[0], rest[1:])


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


@dataclass
class WarmProcess:
    """A forked trial, shaped like the parts of `subprocess.Popen` the runtime uses."""

    pid: int
    stdout: IO[bytes]
    stderr: IO[bytes]
    returncode: int | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def _exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._done.set()


class WarmStarter:
    """The agent's side of the warm-start server: starts it, asks it to fork, learns of exits.

    `popen` runs the server start through the runtime's spawner, so that PR_SET_PDEATHSIG ties
    the server (and through it every forked trial) to the agent. A server that dies takes its
    trials with it (they are reported killed, -9) and is restarted on the next request.
    """

    def __init__(self, popen: Callable[..., subprocess.Popen[bytes]], env: dict[str, str]) -> None:
        self._popen = popen
        self.env = env
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._next_id = 0
        self._replies: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self._procs: dict[int, WarmProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._closed = False

    def spawn(
        self, form: WarmForm, cwd: Path, env: dict[str, str], ident: TaskIdentity | None = None
    ) -> WarmProcess:
        """Fork a trial (as `ident` when given); raises OSError when the server cannot do it."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            with self._lock:
                sock = self._ensure_server()
                self._next_id += 1
                rid = self._next_id
                done = threading.Event()
                box: dict[str, Any] = {}
                self._replies[rid] = (done, box)
                msg = {
                    "op": "spawn",
                    "id": rid,
                    "kind": form.kind,
                    "target": form.target,
                    "args": form.args,
                    "cwd": str(cwd),
                    "env": env,
                    "uid": ident.uid if ident else None,
                    "gid": ident.gid if ident else None,
                    "hide_processes": bool(ident and ident.hide_processes),
                }
                socket.send_fds(sock, [json.dumps(msg).encode()], [out_w, err_w])
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        stdout, stderr = os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb")
        if not done.wait(30.0) or "pid" not in box:
            stdout.close()
            stderr.close()
            with self._lock:
                self._replies.pop(rid, None)
            raise OSError(box.get("error") or "the warm-start server did not answer")
        proc = WarmProcess(int(box["pid"]), stdout, stderr)
        with self._lock:
            self._procs[proc.pid] = proc
            early = self._early_exits.pop(proc.pid, None)
        if early is not None:
            proc._exited(early)
        return proc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sock, server = self._sock, self._server
            self._sock = self._server = None
        if sock is not None:
            # shutdown() wakes our reader's recv and shows the server the hang-up (it exits);
            # close() alone would wait for the blocked recv.
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if server is not None:
            try:
                server.wait(5.0)
            except subprocess.TimeoutExpired:
                server.kill()

    # -- internals (called with the lock held) --

    def _ensure_server(self) -> socket.socket:
        if self._closed:
            raise OSError("the runtime is shut down")
        if self._sock is not None:
            return self._sock
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            server = self._popen(
                args=[sys.executable, str(SERVER), str(theirs.fileno())],
                env=self.env,
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock, self._server = ours, server
        threading.Thread(
            target=self._read, args=(ours, server), name="warm-start", daemon=True
        ).start()
        log.info("warm-start server started: pid %d", server.pid)
        return ours

    def _read(self, sock: socket.socket, server: subprocess.Popen[bytes]) -> None:
        """Dispatch the server's answers and exit notices until it goes away."""
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            msg = json.loads(data)
            with self._lock:
                if "exit" in msg:
                    proc = self._procs.pop(int(msg["exit"]), None)
                    if proc is None:
                        self._early_exits[int(msg["exit"])] = int(msg["code"])
                    else:
                        proc._exited(int(msg["code"]))
                    continue
                done, box = self._replies.pop(int(msg["id"]), (None, {}))
            if done is None:
                # The request gave up waiting (spawn timed out): nobody tracks this trial.
                if "pid" in msg:
                    _kill_group(int(msg["pid"]))
                continue
            box.update(msg)
            done.set()
        # The server is gone: its trials died with it (PR_SET_PDEATHSIG).
        with self._lock:
            if self._sock is sock:
                self._sock = self._server = None
            procs, self._procs = self._procs, {}
            replies, self._replies = self._replies, {}
        if not self._closed:
            code = server.poll()
            log.warning("the warm-start server exited (code %s); it restarts on demand", code)
        sock.close()
        for proc in procs.values():
            proc._exited(-signal.SIGKILL)
        for done, _box in replies.values():
            done.set()


def _kill_group(pid: int) -> None:
    """SIGKILL a forked trial and its process group (which it may not have created yet)."""
    for kill in (os.kill, os.killpg):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
