"""What a runtime is: the thing that turns a StartSpec into a running trial and reports on it.

`process` (local processes) lives in process.py, `docker` (a container per allocation) in
docker/; both take a `RuntimeContext`, start a typed `StartSpec` and report typed
`AllocationReport`s, and build a task's environment with the one function in `_env.py`. The
bookkeeping every runtime needs (allocation records, idempotence, the change event, the poll's
reports) is here, so a runtime only implements launching and killing.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from agent.identity import Isolation, TaskIdentity
from detlab.protocol import AllocationReport, ExitCause, ReportedState, StartSpec

# (allocation_id, stream "stdout"|"stderr", line)
LogSink = Callable[[str, str, str], None]

AGENT_LINE_PREFIX = "[det-agent] "


class LogDelivery(Protocol):
    """What a runtime may ask of the agent's log shipper beyond adding lines (`log_sink`):
    which lines the master accepted, and what it stored (to resume a log after a restart)."""

    def on_delivered(self, listener: Callable[[list[dict[str, Any]]], None]) -> None: ...

    def stored_tail(self, allocation_id: str, limit: int = 2000) -> list[dict[str, Any]]: ...


@dataclass
class RuntimeContext:
    """What every runtime needs to know about the agent it runs in."""

    work_dir: Path
    master_url: str
    agent_id: str
    slots: list[dict[str, Any]]
    log_sink: LogSink
    kill_grace: float = 10.0
    keep_workdirs: bool = False
    # process runtime: fork Python trials from a warm interpreter (agent/runtime/warm.py)
    warm_start: bool = True
    # the shipper behind `log_sink`, for runtimes that resume logs (docker); None in tests
    log_delivery: LogDelivery | None = None
    # Which Unix identity each task runs as (agent/identity.py); None: the agent's own, for
    # tests that drive a runtime directly (det-agent always sets it).
    isolation: Isolation | None = None


@dataclass
class Allocation:
    """One allocation as the agent sees it. Reported RUNNING from the moment it is accepted
    (pid null while the model definition downloads) until it has EXITED."""

    id: str
    state: ReportedState = ReportedState.RUNNING
    pid: int | None = None
    exit_code: int | None = None
    error: str | None = None
    launching: bool = False  # the runtime is creating the process/container right now
    kill_requested: bool = False  # a kill arrived while launching; honour it once launched
    killing: bool = False
    # Why the agent itself stopped it (reported as `cause`, its message as `error`).
    kill_cause: ExitCause | None = None
    cause: ExitCause | None = None
    handle: Any = None  # the runtime's own object (Popen, container)
    proxy_port: int | None = None  # where the task listens for the master's proxy
    done: threading.Event = field(default_factory=threading.Event)

    def report(self) -> AllocationReport:
        return AllocationReport(
            id=self.id,
            state=self.state,
            exit_code=self.exit_code,
            pid=self.pid,
            error=self.error,
            cause=self.cause,
            proxy_port=self.proxy_port,
        )

    @property
    def kill_reason(self) -> str | None:
        return self.kill_cause.message if self.kill_cause else None


class Runtime(ABC):
    """Runs allocations. Thread-safe; `changed` is set whenever an allocation changes state."""

    name: ClassVar[str]

    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx
        self.changed = threading.Event()
        self._lock = threading.RLock()
        self._allocs: dict[str, Allocation] = {}
        # Ids already reported EXITED and forgotten: a late duplicate start must not rerun them.
        self._finished: OrderedDict[str, None] = OrderedDict()

    # -- the interface the agent uses --

    def reserve(self, allocation_id: str) -> bool:
        """Accept an allocation before its launch begins; False if it is already known/finished."""
        with self._lock:
            if allocation_id in self._allocs or allocation_id in self._finished:
                return False
            self._allocs[allocation_id] = Allocation(allocation_id)
            return True

    @abstractmethod
    def start(self, spec: StartSpec, model_def_path: Path | None) -> None:
        """Launch the allocation (blocking until it runs or failed). Idempotent by id."""

    def kill(self, allocation_id: str, cause: ExitCause | None = None) -> None:
        """Stop an allocation: gracefully, then by force after the kill grace. Idempotent.

        `cause` (e.g. the agent shutting down) is reported with the exit, so the master can
        tell a kill it asked for from one it did not."""
        with self._lock:
            rec = self._allocs.get(allocation_id)
            if rec is None or rec.state == ReportedState.EXITED:
                return
            if cause and rec.kill_cause is None:
                rec.kill_cause = cause
            if rec.handle is None:
                if rec.launching:
                    rec.kill_requested = True
                    return
                # Not launched yet (still downloading): it never runs.
                cause = cause or ExitCause.KILLED_BEFORE_START
                self._exited(rec, -9, cause.message, cause)
                return
        self._kill_launched(rec)

    def states(self) -> list[AllocationReport]:
        """Every allocation the agent still has, as the poll reports it."""
        with self._lock:
            return [rec.report() for rec in self._allocs.values()]

    def forget(self, allocation_id: str) -> None:
        """Drop an EXITED allocation once the master has seen it exit."""
        with self._lock:
            rec = self._allocs.get(allocation_id)
            if rec is None or rec.state != ReportedState.EXITED:
                return
            del self._allocs[allocation_id]
            self._finished[allocation_id] = None
            while len(self._finished) > 10_000:
                self._finished.popitem(last=False)

    def fail(
        self, allocation_id: str, exit_code: int, error: str, cause: ExitCause | None = None
    ) -> None:
        """Report that an allocation could not start; the user sees `error` in its logs."""
        with self._lock:
            rec = self._allocs.get(allocation_id)
            if rec is None:
                if allocation_id in self._finished:
                    return
                rec = self._allocs[allocation_id] = Allocation(allocation_id)
            if rec.state == ReportedState.EXITED:
                return
            self._exited(rec, exit_code, error, cause)
        self.ctx.log_sink(allocation_id, "stderr", AGENT_LINE_PREFIX + error)

    def wait_all(self, timeout: float | None = None) -> bool:
        """Wait until every allocation has exited; False on timeout."""
        with self._lock:
            events = [rec.done for rec in self._allocs.values()]
        end = None if timeout is None else time.monotonic() + timeout
        for ev in events:
            remaining = None if end is None else max(0.0, end - time.monotonic())
            if not ev.wait(remaining):
                return False
        return True

    def shutdown(self, timeout: float | None = None) -> bool:
        """Kill every allocation and wait for them (default: kill grace + 10 s)."""
        with self._lock:
            ids = [a for a, rec in self._allocs.items() if rec.state != ReportedState.EXITED]
        for aid in ids:
            self.kill(aid, ExitCause.AGENT_SHUTDOWN)
        ok = self.wait_all(self.ctx.kill_grace + 10.0 if timeout is None else timeout)
        self._close()
        return ok

    # -- for subclasses --

    def _identity(self, spec: StartSpec) -> TaskIdentity | None:
        """Who the task runs as (None: the agent's own identity). Raises IdentityRefused."""
        if self.ctx.isolation is None:
            return None
        return self.ctx.isolation.plan(spec)

    def _claim(self, allocation_id: str) -> Allocation | None:
        """The record a `start` may launch, or None: already exited, launching or launched.

        Every runtime's `start` begins here, so a duplicate or late start never runs twice."""
        with self._lock:
            rec = self._allocs.get(allocation_id)
            if rec is None:
                if not self.reserve(allocation_id):
                    return None
                return self._allocs[allocation_id]
            if rec.state == ReportedState.EXITED or rec.handle is not None or rec.launching:
                return None
            return rec

    # What `_kill_launched` tells the trial's log it is stopping ("the trial", "the container").
    stop_subject: ClassVar[str] = "the trial"

    def _kill_launched(self, rec: Allocation) -> None:
        """Stop a launched allocation (rec.handle is set) once; never blocks for the grace.

        Says so in the trial's log, then `_begin_stop` sends SIGTERM (or its equivalent) and a
        thread escalates to SIGKILL after the grace period.
        """
        with self._lock:
            if rec.killing or rec.state == ReportedState.EXITED:
                return
            rec.killing = True
            handle = rec.handle
        if handle.exited.is_set():
            return
        grace = self.ctx.kill_grace
        self.ctx.log_sink(
            rec.id,
            "stderr",
            f"{AGENT_LINE_PREFIX}stopping {self.stop_subject}: SIGTERM now, "
            f"SIGKILL after {grace:g} s",
        )
        self._begin_stop(rec, handle)

    @abstractmethod
    def _begin_stop(self, rec: Allocation, handle: Any) -> None:
        """Start stopping a launched allocation; must not block for the grace."""

    def _close(self) -> None:
        """Release runtime resources after shutdown (nothing by default)."""
        return None

    def _exited(
        self,
        rec: Allocation,
        exit_code: int,
        error: str | None = None,
        cause: ExitCause | None = None,
    ) -> None:
        with self._lock:
            rec.state = ReportedState.EXITED
            rec.exit_code = exit_code
            rec.error = error
            rec.cause = cause or rec.kill_cause
            rec.launching = False
        rec.done.set()
        self.changed.set()

    def _running(self, rec: Allocation, pid: int | None, handle: Any) -> None:
        with self._lock:
            rec.pid = pid
            rec.handle = handle
            rec.launching = False
        self.changed.set()
