"""The `process` runtime: each allocation is a local process group in its own directory.

Trials run with the agent's own interpreter first on PATH (it has torch and the harness), in a
new session so a kill reaches the whole process group, and with PR_SET_PDEATHSIG so that an agent
killed with -9 leaves no orphans behind: the master restarts such trials elsewhere.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import importlib.util
import logging
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agent.identity import IdentityRefused, Mode, TaskIdentity, unreachable_ancestors
from agent.modeldef import ModelDefError, extract_model_def
from agent.runtime import AGENT_LINE_PREFIX, Allocation, Runtime, RuntimeContext
from agent.runtime._dirs import hand_over, make_task_dir, prepare_checkpoint_dir
from agent.runtime._env import SCRUBBED_ENV, EnvLayout, prepend, task_env
from agent.runtime._procfs import hide_other_processes
from agent.runtime.warm import WarmProcess, WarmStarter, warm_form
from detlab.protocol import ReportedState, StartSpec

log = logging.getLogger(__name__)

# Characters that need a shell; anything else is split with shlex and exec'd directly.
_SHELL_CHARS = frozenset("|&;<>()$`\\*?[]{}~#!\n")

_PR_SET_PDEATHSIG = 1
try:
    _libc: Any = ctypes.CDLL(None, use_errno=True)
    _prctl: Any = _libc.prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _prctl = None


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the thread that forked it (the spawner) dies."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _become_hidden(ident: TaskIdentity) -> Callable[[], None]:
    """preexec_fn of a cold start that hides other processes (agent/runtime/_procfs.py).
    subprocess's own `user=` switches before preexec_fn, too late to mount /proc, so this does
    the whole switch, in the warm start's order: /proc, groups, gid, uid, umask, death signal.
    A failure ends the child (126) with the reason on its stderr, never runs the trial."""

    def preexec() -> None:
        try:
            hide_other_processes()
            os.setgroups([])
            os.setresgid(ident.gid, ident.gid, ident.gid)
            os.setresuid(ident.uid, ident.uid, ident.uid)
        except OSError as e:
            os.write(2, f"cannot start the trial as {ident.uid}:{ident.gid}: {e}\n".encode())
            os._exit(126)
        os.umask(0o077)
        _die_with_parent()

    return preexec


class _Spawner:
    """Forks every trial from one long-lived thread.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process; a
    child forked by a short-lived worker thread would be killed as soon as that thread returned.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="spawner", daemon=True)
        self._thread.start()

    def popen(self, **kwargs: Any) -> subprocess.Popen[bytes]:
        if self._closed:
            raise OSError("the runtime is shut down")
        future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._queue.put((kwargs, future))
        return future.result()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            kwargs, future = item
            try:
                future.set_result(subprocess.Popen(**kwargs))
            except BaseException as e:
                future.set_exception(e)

    def close(self) -> None:
        self._closed = True
        self._queue.put(None)


@dataclass
class _Proc:
    popen: subprocess.Popen[bytes] | WarmProcess
    workdir: Path
    exited: threading.Event = field(default_factory=threading.Event)


def build_argv(entrypoint: Any) -> list[str]:
    """The argv for an entrypoint: exec'd directly unless it needs a shell."""
    if isinstance(entrypoint, list | tuple):
        argv = [str(a) for a in entrypoint]
        if not argv:
            raise ValueError("the experiment's entrypoint is empty")
        return argv
    text = str(entrypoint or "").strip()
    if not text:
        raise ValueError("the experiment's entrypoint is empty")
    if any(c in _SHELL_CHARS for c in text):
        return ["/bin/sh", "-c", text]
    try:
        argv = shlex.split(text)
    except ValueError:  # unbalanced quotes: let the shell report it in its own words
        return ["/bin/sh", "-c", text]
    if "=" in argv[0]:  # `VAR=value cmd` is a shell assignment
        return ["/bin/sh", "-c", text]
    return argv


def harness_root() -> str | None:
    """The directory that contains the `harness` package, for the trial's PYTHONPATH."""
    spec = importlib.util.find_spec("harness")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))).resolve().parent)


def alias_dir(root: str | None) -> str:
    """The directory holding the trial-only `determined` alias package (harness/_alias)."""
    return str(Path(root) / "harness" / "_alias") if root else ""


def _safe_dir_name(allocation_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", allocation_id).lstrip(".") or "allocation"


_ALLOCATION_DIR = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def stale_allocation_dirs(names: list[str], running: set[str]) -> list[str]:
    """Pure: the work directories (named by allocation id) of allocations not running here."""
    return sorted(n for n in names if _ALLOCATION_DIR.match(n) and n not in running)


def sweep_work_dir(work_dir: Path, running: set[str]) -> list[str]:
    """Remove the work directories of allocations that died with an earlier agent process
    (process trials die with their agent, so at start none of them runs)."""
    try:
        names = [e.name for e in os.scandir(work_dir) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    stale = stale_allocation_dirs(names, {_safe_dir_name(a) for a in running})
    for name in stale:
        shutil.rmtree(work_dir / name, ignore_errors=True)
        log.info("removed the work directory of allocation %s (it died with its agent)", name)
    return stale


class ProcessRuntime(Runtime):
    """Runs each allocation as a local process group."""

    name = "process"

    def __init__(self, ctx: RuntimeContext) -> None:
        super().__init__(ctx)
        self._harness_root = harness_root()
        if ctx.isolation is not None and ctx.isolation.mode == Mode.ISOLATED:
            _check_reachable(ctx.work_dir, self._harness_root)
        if not ctx.keep_workdirs:
            sweep_work_dir(ctx.work_dir, set())
        self._spawner = _Spawner()
        self._warm: WarmStarter | None = None
        if ctx.warm_start:
            server_env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
            server_env["PYTHONPATH"] = prepend(
                server_env.get("PYTHONPATH"), [self._harness_root or ""]
            )
            self._warm = WarmStarter(self._start_server, server_env)

    def _start_server(self, **kwargs: Any) -> subprocess.Popen[bytes]:
        return self._spawner.popen(preexec_fn=_die_with_parent, **kwargs)

    # -- environment --

    def build_env(
        self, spec: StartSpec, workdir: Path, ident: TaskIdentity | None = None
    ) -> dict[str, str]:
        """The trial's environment (agent/runtime/_env.py), starting from the agent's own."""
        layout = EnvLayout(
            inherited=dict(os.environ),
            code_dirs=(self._harness_root or "", str(workdir), alias_dir(self._harness_root)),
            path_first=(os.path.dirname(sys.executable),),
            home=None if ident is None else ident.home or str(workdir),
            user=None if ident is None else ident.name,
        )
        return task_env(
            spec,
            slots=self.ctx.slots,
            master_url=self.ctx.master_url,
            agent_id=self.ctx.agent_id,
            layout=layout,
        )

    # -- lifecycle --

    def start(self, spec: StartSpec, model_def_path: Path | None) -> None:
        aid = spec.allocation_id
        rec = self._claim(aid)
        if rec is None:
            return
        workdir = self.ctx.work_dir / _safe_dir_name(aid)
        try:
            ident = self._identity(spec)
            argv = build_argv(spec.entrypoint)
            if workdir.exists():
                shutil.rmtree(workdir)
            make_task_dir(workdir)
            if model_def_path is not None:
                extract_model_def(model_def_path, workdir)
            hand_over(workdir, ident)
            prepare_checkpoint_dir(spec.checkpoint_storage, ident)
            env = self.build_env(spec, workdir, ident)
            if spec.proxy:
                rec.proxy_port = free_tcp_port()
                env["DET_TASK_PORT"] = str(rec.proxy_port)
        except IdentityRefused as e:
            self._remove(workdir)
            self.fail(aid, 1, f"allocation {aid} refused: {e}")
            return
        except (ModelDefError, ValueError, OSError) as e:
            self._remove(workdir)
            self.fail(aid, 1, f"cannot prepare allocation {aid}: {e}")
            return
        with self._lock:
            if rec.state == ReportedState.EXITED:  # killed while we were preparing
                self._remove(workdir)
                return
            rec.launching = True
        try:
            proc, how = self._launch(argv, workdir, env, ident)
        except OSError as e:
            self._remove(workdir)
            self.fail(aid, *_start_error(spec.entrypoint, argv, e))
            return
        handle = _Proc(proc, workdir)
        self._running(rec, proc.pid, handle)
        log.info("allocation %s started (%s): pid %d: %s", aid, how, proc.pid, shlex.join(argv))
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            threading.Thread(
                target=self._pump, args=(aid, name, pipe), name=f"{name}-{aid}", daemon=True
            )
            for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr))
        ]
        for t in readers:
            t.start()
        threading.Thread(
            target=self._wait, args=(rec, handle, readers), name=f"wait-{aid}", daemon=True
        ).start()
        with self._lock:
            kill_now = rec.kill_requested
        if kill_now:
            self._kill_launched(rec)

    def _launch(
        self, argv: list[str], workdir: Path, env: dict[str, str], ident: TaskIdentity | None
    ) -> tuple[subprocess.Popen[bytes] | WarmProcess, str]:
        """Fork a Python entrypoint from the warm interpreter, else start it with subprocess."""
        if self._warm is not None:
            form = warm_form(argv, env, workdir, self._warm.env)
            if form is not None:
                try:
                    return self._warm.spawn(form, workdir, env, ident), "warm"
                except OSError as e:
                    log.warning("warm start failed (%s): starting the trial cold", e)
        # subprocess switches the identity (groups, gid, uid) before preexec_fn, so the
        # parent-death signal, which an identity change clears, is set after it.
        as_user: dict[str, Any] = {}
        preexec = _die_with_parent
        if ident is not None and ident.hide_processes:
            preexec = _become_hidden(ident)
        elif ident is not None:
            as_user = {"user": ident.uid, "group": ident.gid, "extra_groups": [], "umask": 0o077}
        proc = self._spawner.popen(
            **as_user,
            args=argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )
        return proc, "cold"

    def _pump(self, aid: str, stream: str, pipe: IO[bytes]) -> None:
        """Forward one output stream line by line; a line is kept whole however long it is."""
        try:
            for raw in iter(pipe.readline, b""):
                self.ctx.log_sink(aid, stream, raw.decode("utf-8", errors="replace").rstrip("\r\n"))
        except (OSError, ValueError) as e:
            log.debug("reading %s of %s stopped: %s", stream, aid, e)
        finally:
            pipe.close()

    def _wait(self, rec: Allocation, handle: _Proc, readers: list[threading.Thread]) -> None:
        code = handle.popen.wait()
        handle.exited.set()
        # Nothing of a trial outlives it: take down what is left of its process group.
        _killpg(handle.popen.pid, signal.SIGKILL)
        for t in readers:
            t.join(timeout=5.0)
        self._remove(handle.workdir)
        log.info("allocation %s exited with code %d", rec.id, code)
        with self._lock:
            reason = rec.kill_reason
        self._exited(rec, code, reason)

    def _begin_stop(self, rec: Allocation, handle: _Proc) -> None:
        log.info("allocation %s: SIGTERM (SIGKILL after %g s)", rec.id, self.ctx.kill_grace)
        _killpg(handle.popen.pid, signal.SIGTERM)
        threading.Thread(
            target=self._escalate, args=(rec, handle), name=f"kill-{rec.id}", daemon=True
        ).start()

    def _escalate(self, rec: Allocation, handle: _Proc) -> None:
        if handle.exited.wait(self.ctx.kill_grace):
            return
        self.ctx.log_sink(
            rec.id,
            "stderr",
            f"{AGENT_LINE_PREFIX}the trial did not exit within {self.ctx.kill_grace:g} s "
            "of SIGTERM: SIGKILL",
        )
        log.info("allocation %s: SIGKILL", rec.id)
        _killpg(handle.popen.pid, signal.SIGKILL)

    def _remove(self, workdir: Path) -> None:
        if self.ctx.keep_workdirs:
            return
        shutil.rmtree(workdir, ignore_errors=True)

    def _close(self) -> None:
        if self._warm is not None:
            self._warm.close()
        self._spawner.close()


def unreachable_dirs(work_dir: Path, harness: str | None) -> list[str]:
    """The directories (no o+x) that stop trials running as other users from passing through
    to their work dir, the harness and this interpreter."""
    blocked: list[str] = []
    for path in (str(work_dir), harness or "", *python_dirs()):
        if path:
            blocked += [d for d in unreachable_ancestors(path) if d not in blocked]
    return blocked


def _check_reachable(work_dir: Path, harness: str | None) -> None:
    """Raises ValueError naming the `unreachable_dirs` of an isolating agent."""
    blocked = unreachable_dirs(work_dir, harness)
    if blocked:
        raise ValueError(
            "trials run as other Unix users and cannot pass through "
            + ", ".join(blocked)
            + " (no search permission for others): chmod o+x them, or pick a --work-dir "
            "(and an installation) that others can reach"
        )


def python_dirs() -> list[str]:
    """What a trial needs of this interpreter: its executable (the venv's and the real one),
    its standard library and its packages."""
    paths = sysconfig.get_paths()
    return [
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
        paths["stdlib"],
        paths["purelib"],
        paths["platlib"],
    ]


def free_tcp_port() -> int:
    """A port nothing listens on now, for a task that serves the master's proxy. The task binds
    it a moment later; another process taking it first makes the task fail to start (its log
    says so), never serve someone else's traffic: the proxy adds the task's own token."""
    with socket.socket() as s:
        s.bind(("", 0))
        port: int = s.getsockname()[1]
        return port


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _start_error(entrypoint: Any, argv: list[str], err: OSError) -> tuple[int, str]:
    """(exit code, message) for a process that could not be created, in the shell's codes."""
    what = f"cannot start the entrypoint {entrypoint!r}"
    if isinstance(err, FileNotFoundError):
        where = "no such file" if "/" in argv[0] else "not found on PATH"
        return 127, f"{what}: {argv[0]!r}: {where}"
    if isinstance(err, PermissionError):
        return 126, f"{what}: {argv[0]!r}: permission denied (is it executable?)"
    return 1, f"{what}: {err}"
